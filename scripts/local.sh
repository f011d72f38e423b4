#!/usr/bin/env bash
# One command to a working, authenticated CDP endpoint on this machine:
# installs Chromium when missing (Debian/Ubuntu, as root), builds the controller in release
# mode, and runs `wallcrawler-controller local`, which prints `connectUrl: ws://…` on stdout.
# Extra arguments go to `local` (e.g. --port 0, --token-ttl 600). Ctrl-C ends it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# shellcheck source=scripts/ensure-chromium.sh
source "$ROOT/scripts/ensure-chromium.sh"
ensure_chromium

echo "[local] building wallcrawler-controller (release)" >&2
cargo build --release --locked --quiet --bin wallcrawler-controller
exec "$ROOT/target/release/wallcrawler-controller" local "$@"
