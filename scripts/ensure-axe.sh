#!/usr/bin/env bash
# Installs axe-core (the accessibility engine the browser tests inject into the pages) from npm
# into the user's cache, once per pinned version, and prints the path of axe.min.js. The npm
# cache makes a reinstall offline-fast; the version is pinned here and nowhere else.
set -euo pipefail
version=4.11.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/parley/axe-core-$version"
file="$dir/node_modules/axe-core/axe.min.js"
if [ ! -s "$file" ]; then
  if ! command -v npm >/dev/null; then
    echo "ensure-axe: npm is missing; install Node.js (apt-get install nodejs npm) to run the accessibility check." >&2
    exit 1
  fi
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$dir" "axe-core@$version" >&2)
  test -s "$file"
fi
echo "$file"
