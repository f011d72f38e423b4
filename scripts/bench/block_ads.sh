#!/usr/bin/env bash
# blockAds' cost on page loads (tests/node/block-ads-bench.mjs): `wallcrawler-controller run`
# without and with SESSION_BROWSER={"blockAds":true}, each loading a page of 200 subresources
# from 10 site hosts (nothing blocked: the cost of checking each connection's host) and the
# same page with 20 of them on ad and tracking hosts (answered by a local stand-in through a
# local proxy without blockAds, refused by the hop with it). Median and best page load of
# RUNS x ROUNDS each, the controller's start to ready (with blockAds: the filter engine's
# build), its CPU seconds per page load. Everything on 127.0.0.0/8; nothing leaves the machine.
#
# Prints the result and writes it to bench-results/block-ads-<UTC time>.json.
#
# Knobs (environment):
#   RUNS=10 ROUNDS=3
#   CHROME=/usr/lib/chromium/chromium
#   BUILD=1         cargo build --release first (0 to reuse target/release)
#   OUT_DIR=bench-results
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-10}"
ROUNDS="${ROUNDS:-3}"
CHROME="${CHROME:-/usr/lib/chromium/chromium}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
CTL="$(realpath -m "${CTL:-$TARGET_DIR/release/wallcrawler-controller}")"

log() { printf '[block-ads] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -x "$CHROME" ]] || die "no Chromium at $CHROME (scripts/install-test-deps.sh)"
[[ -d tests/node/node_modules ]] || die "run scripts/install-test-deps.sh first"
for list in easylist easyprivacy; do
  f=/usr/share/chromium/extensions/ublock-origin/assets/thirdparties/easylist/$list.txt
  [[ -f "$f" ]] || die "no $f (apt-get install webext-ublock-origin-chromium, or scripts/install-test-deps.sh)"
done
if [[ "$BUILD" == 1 ]]; then
  log "cargo build --release"
  cargo build --release --locked --bin wallcrawler-controller >&2
fi
[[ -x "$CTL" ]] || die "missing $CTL (run with BUILD=1)"

mkdir -p "$OUT_DIR"
out="$OUT_DIR/block-ads-$(date -u +%Y%m%dT%H%M%SZ).json"
log "200 subresources x $RUNS x $ROUNDS rounds: without blockAds, with blockAds"
(cd tests/node && node block-ads-bench.mjs --controller "$CTL" --chrome "$CHROME" --runs "$RUNS" --rounds "$ROUNDS") | tee "$out"
log "written to $out"
