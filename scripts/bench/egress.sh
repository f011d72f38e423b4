#!/usr/bin/env bash
# The egress hop's cost on a 50 MiB download (tests/node/egress-bench.mjs): Chromium alone
# (no hop), through the controller's hop going direct, and through the hop to a local HTTP
# proxy with Basic authentication. Median and best of RUNS downloads each, and the
# controller's CPU seconds per download. Everything on 127.0.0.1.
#
# Prints the result and writes it to bench-results/egress-<UTC time>.json.
#
# Knobs (environment):
#   MIB=50 RUNS=5
#   CHROME=/usr/lib/chromium/chromium
#   BUILD=1         cargo build --release first (0 to reuse target/release)
#   OUT_DIR=bench-results
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
MIB="${MIB:-50}"
RUNS="${RUNS:-5}"
CHROME="${CHROME:-/usr/lib/chromium/chromium}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
CTL="$(realpath -m "${CTL:-$TARGET_DIR/release/wallcrawler-controller}")"

log() { printf '[egress] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -x "$CHROME" ]] || die "no Chromium at $CHROME (scripts/install-test-deps.sh)"
[[ -d tests/node/node_modules ]] || die "run scripts/install-test-deps.sh first"
if [[ "$BUILD" == 1 ]]; then
  log "cargo build --release"
  cargo build --release --locked --bin wallcrawler-controller >&2
fi
[[ -x "$CTL" ]] || die "missing $CTL (run with BUILD=1)"

mkdir -p "$OUT_DIR"
out="$OUT_DIR/egress-$(date -u +%Y%m%dT%H%M%SZ).json"
log "$MIB MiB x $RUNS: chromium alone, through the hop, through the hop and a local HTTP proxy"
(cd tests/node && node egress-bench.mjs --controller "$CTL" --chrome "$CHROME" --mib "$MIB" --runs "$RUNS") | tee "$out"
log "written to $out"
