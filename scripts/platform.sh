#!/usr/bin/env bash
# The whole platform on this machine, no AWS account: installs Chromium and ffmpeg (for
# recordings) when missing (as root on Debian/Ubuntu) and Chromium's managed policy (as root: scripts/lib.sh), builds the controller and the control plane (the one debug build the
# tests also use: scripts/lib.sh; WALLCRAWLER_BUILD=release for an optimised one), and runs
# `wallcrawler-control-plane serve`, which prints `baseURL:`, `apiKey:`, `projectId:` and
# `gateway:` on stdout. Sessions created through the API run as local controller processes,
# reached through one connect gateway.
# Extra arguments go to `serve` (default: --port 8080 --data-dir .wallcrawler). Ctrl-C ends it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# shellcheck source=scripts/ensure-chromium.sh
source "$ROOT/scripts/ensure-chromium.sh"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
ensure_chromium
ensure_ffmpeg
# The image's managed policy (URL blocklist, download directory) for every Chrome it starts.
wc_install_chrome_policy platform

echo "[platform] building (${WALLCRAWLER_BUILD:-debug})" >&2
wc_build
exec "$(wc_bin_dir)/wallcrawler-control-plane" serve "$@"
