#!/usr/bin/env bash
# The whole platform on this machine, no AWS account: installs Chromium when missing (as
# root on Debian/Ubuntu), builds the controller and the control plane in release mode, and runs
# `wallcrawler-control-plane serve`, which prints `baseURL:`, `apiKey:` and `projectId:` on
# stdout. Sessions created through the API run as local controller processes.
# Extra arguments go to `serve` (default: --port 8080 --data-dir .wallcrawler). Ctrl-C ends it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# shellcheck source=scripts/ensure-chromium.sh
source "$ROOT/scripts/ensure-chromium.sh"
ensure_chromium

echo "[platform] building wallcrawler-controller and wallcrawler-control-plane (release)" >&2
cargo build --release --locked --quiet --bin wallcrawler-controller --bin wallcrawler-control-plane
exec "$ROOT/target/release/wallcrawler-control-plane" serve "$@"
