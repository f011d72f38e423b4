#!/usr/bin/env bash
# One command to a working, authenticated CDP endpoint on this machine:
# installs Chromium when missing (Debian/Ubuntu, as root), builds the controller in release
# mode, and runs `wallcrawler-controller local`, which prints `connectUrl: ws://…` on stdout.
# Extra arguments go to `local` (e.g. --port 0, --token-ttl 600). Ctrl-C ends it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -z "${CHROME_PATH:-}" ]] && ! command -v chromium >/dev/null && ! command -v google-chrome >/dev/null \
  && [[ ! -x /usr/lib/chromium/chromium ]]; then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "Chromium is missing: install it (apt-get install chromium) or set CHROME_PATH" >&2
    exit 1
  fi
  echo "[local] installing Chromium (apt-get install chromium)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi

echo "[local] building wallcrawler-controller (release)" >&2
cargo build --release --locked --quiet --bin wallcrawler-controller
exec "$ROOT/target/release/wallcrawler-controller" local "$@"
