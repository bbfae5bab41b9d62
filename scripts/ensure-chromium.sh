#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests when it is missing (as root), or says what to do.
set -euo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-chromium: Chromium is missing; install it (sudo apt-get install chromium) to run the browser tests." >&2
  exit 1
fi
echo "ensure-chromium: installing Debian's chromium with apt-get (about a minute)…"
apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null
command -v chromium >/dev/null
