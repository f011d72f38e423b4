#!/usr/bin/env bash
# One command to a working, authenticated CDP endpoint on this machine:
# installs Chromium when missing (Debian/Ubuntu, as root) and its managed policy (as root:
# scripts/lib.sh), builds (the one debug build the tests
# also use: scripts/lib.sh; WALLCRAWLER_BUILD=release for an optimised one), and runs
# `wallcrawler-controller local`, which prints `connectUrl: ws://…` on stdout.
# Extra arguments go to `local` (e.g. --port 0, --token-ttl 600). Ctrl-C ends it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# shellcheck source=scripts/ensure-chromium.sh
source "$ROOT/scripts/ensure-chromium.sh"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
ensure_chromium
# The image's managed policy (URL blocklist, download directory) for the Chrome it starts.
wc_install_chrome_policy local

echo "[local] building (${WALLCRAWLER_BUILD:-debug})" >&2
wc_build
exec "$(wc_bin_dir)/wallcrawler-controller" local "$@"
