#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers for the tests: starts an installed-but-stopped cluster,
# installs one with apt when missing (as root), and gives the postgres user trust on 127.0.0.1
# when a fresh install asks for passwords. Prints what it did; exits non-zero with a message when
# it cannot.
set -euo pipefail
url="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"

answers() { pg_isready -q -d "$url" 2>/dev/null && psql "$url" -Atqc 'select 1' >/dev/null 2>&1; }

if command -v pg_isready >/dev/null && answers; then exit 0; fi

if [ -n "${TEST_DATABASE_URL:-}" ]; then
  echo "ensure-postgres: TEST_DATABASE_URL is set but the server does not answer: ${url%%@*}@…" >&2
  exit 1
fi

if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "ensure-postgres: PostgreSQL is not installed. Install it (sudo apt-get install postgresql) or set TEST_DATABASE_URL." >&2
    exit 1
  fi
  echo "ensure-postgres: installing PostgreSQL with apt-get…"
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq postgresql >/dev/null
fi

ver=$(ls /etc/postgresql | sort -n | tail -n1)
if ! pg_lsclusters -h 2>/dev/null | awk '{print $4}' | grep -q online; then
  echo "ensure-postgres: starting cluster $ver/main…"
  if [ "$(id -u)" = 0 ]; then
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || pg_ctlcluster "$ver" main start
  else
    pg_ctlcluster "$ver" main start
  fi
fi

for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done

if ! answers; then
  # A fresh Debian cluster asks for a password on 127.0.0.1: trust loopback for the tests.
  hba="/etc/postgresql/$ver/main/pg_hba.conf"
  if [ "$(id -u)" = 0 ] && [ -w "$hba" ] && ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    echo "ensure-postgres: trusting 127.0.0.1 in $hba for the test user"
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    su postgres -c "psql -qc 'select pg_reload_conf()'" >/dev/null
    sleep 0.5
  fi
fi

if ! answers; then
  echo "ensure-postgres: PostgreSQL does not answer at 127.0.0.1:5432 as user postgres; set TEST_DATABASE_URL." >&2
  exit 1
fi
