#!/usr/bin/env bash
# Issue 18's workload (docs/benchmarks.md, "Approvals beside the peers"): 200 conversations each
# awaiting a gated webhook call, approved by 16 concurrent clients, the model an OpenAI-compatible
# streaming server over HTTP, the final answer observed on each conversation's event stream.
# Builds web and loadgen; each round runs `loadgen -workload approvals` on a fresh database.
#
#   scripts/approvals.sh                      # one round of Parley
#   ROUNDS=3 scripts/approvals.sh             # three rounds
#   PEERS=DIR ROUNDS=3 scripts/approvals.sh   # DIR: a checkout of the peer implementations
#                                             # Parley, Eino and ADK-Go alternating, round by round,
#                                             # with the peers' own commands (built from the module proxy)
#   PPROF=/tmp/prof scripts/approvals.sh      # also the server's phase-2 CPU and allocation profiles
#   N=200 C=16 POOL=0 ...                     # the workload's size, the server's pool_max_conns
#
# Needs TEST_DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432/postgres) to let
# that user create databases. Exits non-zero when a run failed its checks.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-1}"
n="${N:-200}"
c="${C:-16}"
pool="${POOL:-0}"
pg="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

tags=()
if [ -n "${PPROF:-}" ]; then
  tags=(-tags pprof)
  mkdir -p "$PPROF"
fi
echo "approvals: building web and loadgen…" >&2
go build "${tags[@]}" -o "$work/web" ./cmd/web
go build -o "$work/loadgen" ./cmd/loadgen

peers=""
if [ -n "${PEERS:-}" ]; then
  peers="$(cd "$PEERS" && pwd)"
  echo "approvals: building the peers in a copy of $peers…" >&2
  cp -r "$peers/eino" "$peers/adkgo" "$work/"
  (cd "$work/eino" && go build -o einopeer .)
  (cd "$work/adkgo" && go build -o adkpeer .)
fi

status=0
for round in $(seq 1 "$rounds"); do
  echo "=== round $round: parley ($(uptime | sed 's/.*load average/load average/'))"
  args=(-workload approvals -web "$work/web" -pg "$pg" -n "$n" -c "$c" -pool "$pool")
  [ -n "${PPROF:-}" ] && args+=(-pprof-dir "$PPROF")
  "$work/loadgen" "${args[@]}" || status=1
  if [ -n "$peers" ]; then
    echo "=== round $round: eino ($(uptime | sed 's/.*load average/load average/'))"
    (cd "$work/eino" && ./einopeer -mode bench -store database -n "$n" -c "$c" -pg "$pg" | grep '^#') || status=1
    echo "=== round $round: adkgo ($(uptime | sed 's/.*load average/load average/'))"
    (cd "$work/adkgo" && ./adkpeer -mode bench -session database -n "$n" -c "$c" -pg "$pg" | grep '^#') || status=1
  fi
done
exit "$status"
