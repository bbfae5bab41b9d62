#!/usr/bin/env bash
# The load run (issue 7): builds web and loadgen, starts web on a fresh PostgreSQL database with
# the demo model (no pacing) and raised per-user budgets, creates a user and a token with the
# CLI, drives CONVERSATIONS conversations at once through the public API and event streams,
# measures bare INSERT commits on the same database during the same run (the floor), prints
# the report and the server's final metrics, then stops the server and drops the database.
#
#   scripts/loadtest.sh                 # 500 conversations
#   CONVERSATIONS=50 scripts/loadtest.sh
#   POOL=16 scripts/loadtest.sh         # pool_max_conns for the server and the floor
#
# Needs TEST_DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432/postgres) to let
# that user create databases. Exits non-zero when any conversation failed.
set -euo pipefail
cd "$(dirname "$0")/.."

conversations="${CONVERSATIONS:-500}"
admin_url="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
db="parley_load_$$"
# The same server and options, another database: replace the path of the URL.
base="${admin_url%%\?*}"
query=""
case "$admin_url" in *\?*) query="?${admin_url#*\?}" ;; esac
db_url="${base%/*}/${db}${query}"
# POOL=N sets pool_max_conns for the server and the floor alike (default: pgxpool's, max(4, CPUs)).
if [ -n "${POOL:-}" ]; then
  case "$db_url" in *\?*) db_url="${db_url}&pool_max_conns=${POOL}" ;; *) db_url="${db_url}?pool_max_conns=${POOL}" ;; esac
fi

work="$(mktemp -d)"
server_pid=""
cleanup() {
  status=$?
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  psql "$admin_url" -qAtc "DROP DATABASE IF EXISTS ${db} WITH (FORCE)" >/dev/null 2>&1 || echo "loadtest: could not drop database ${db}" >&2
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT INT TERM

echo "loadtest: building web and loadgen…"
go build -o "$work/web" ./cmd/web
go build -o "$work/loadgen" ./cmd/loadgen

psql "$admin_url" -qAtc "CREATE DATABASE ${db}" >/dev/null
echo "loadtest: database ${db} created"

# Sockets and streams: one event stream and one API connection per conversation, both ends here.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

export DATABASE_URL="$db_url"
export PARLEY_ADDR="127.0.0.1:0"
export PARLEY_ENV=production
# Production on PostgreSQL needs the cluster key (one process here: any fresh one does).
export PARLEY_CLUSTER_KEY="${PARLEY_CLUSTER_KEY:-$(head -c 32 /dev/urandom | base64)}"
export PARLEY_AUDIT_KEY="loadtest audit key: a throwaway database, 32 bytes or more"
export PARLEY_AUDIT_ANCHOR_FILE="$work/audit-anchors.jsonl"
export PARLEY_MODEL=demo
export PARLEY_DEMO_PACE=0
export PARLEY_MESSAGES_PER_MINUTE=1000000 PARLEY_MESSAGE_BURST=100000
export PARLEY_API_PER_MINUTE=10000000 PARLEY_API_BURST=1000000

"$work/web" migrate >/dev/null
printf 'load test password\n' | "$work/web" user add --name load --role member --password-stdin >/dev/null
token="$("$work/web" token create --user load --label loadtest)"

"$work/web" serve >"$work/stdout" 2>"$work/server.log" &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(sed -n 's/^parley listening on //p' "$work/stdout" | head -n1)"
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "loadtest: the server exited:" >&2; tail -n 20 "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "loadtest: the server did not say where it listens" >&2; exit 1; }
echo "loadtest: server at $url (pid $server_pid), ${conversations} conversations, $(nproc) CPUs"

xacts() { psql "$admin_url" -qAtc "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '${db}'"; }
xacts_before="$(xacts)"
set +e
command time -f "loadgen: %U s user, %S s system, %M KB max RSS" "$work/loadgen" -url "$url" -token "$token" -conversations "$conversations" -timeout 10m -floor-db "$db_url"
rc=$?
set -e

sleep 11 # backends report their statistics when idle, within ~10 s
echo "database transactions during the run (statements outside a transaction count one each, the floor's included): $(( $(xacts) - xacts_before ))"
echo "--- server metrics after the run"
curl -fsS "$url/metrics" 2>/dev/null | grep -E '^parley_(live_actors|pending_calls|sockets|dropped_frames_total|expiries_fired_total|retries_total|actor_revivals_total|resolve_seconds_(count|sum))|^process_resident_memory_bytes|^process_cpu_seconds_total|^go_goroutines' || true
echo "--- server log: $(wc -l <"$work/server.log") lines, $(grep -c '"level":"ERROR"' "$work/server.log" || true) errors"
grep '"level":"ERROR"' "$work/server.log" | head -n 5 || true
exit "$rc"
