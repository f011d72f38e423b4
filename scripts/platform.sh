#!/usr/bin/env bash
# The whole platform on this machine, no AWS account: installs Chromium when missing (as
# root on Debian/Ubuntu), builds the controller and the control plane in release mode, and runs
# `wallcrawler-control-plane serve`, which prints `baseURL:`, `apiKey:` and `projectId:` on
# stdout. Sessions created through the API run as local controller processes.
# Extra arguments go to `serve` (default: --port 8080 --data-dir .wallcrawler). Ctrl-C ends it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -z "${CHROME_PATH:-}" ]] && ! command -v chromium >/dev/null && ! command -v google-chrome >/dev/null \
  && [[ ! -x /usr/lib/chromium/chromium ]]; then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "Chromium is missing: install it (apt-get install chromium) or set CHROME_PATH" >&2
    exit 1
  fi
  echo "[platform] installing Chromium (apt-get install chromium)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi

echo "[platform] building wallcrawler-controller and wallcrawler-control-plane (release)" >&2
cargo build --release --locked --quiet --bin wallcrawler-controller --bin wallcrawler-control-plane
exec "$ROOT/target/release/wallcrawler-control-plane" serve "$@"
