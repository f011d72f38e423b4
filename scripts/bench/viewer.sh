#!/usr/bin/env bash
# The live viewer's cost and delay on `wallcrawler-controller local` (release build), measured by
# tests/node/viewer-bench.mjs with a second headless Chromium as the viewers:
#
# 1. cpu: a page animating on every frame (requestAnimationFrame colour change) watched by N
#    viewers (each N in VIEWERS) for SECS seconds after WARMUP_SECS: CPU seconds per wall second
#    of the controller process and of its Chrome (every descendant), from /proc
#    (utime+stime), and frames drawn per second by each viewer. One controller per N.
# 2. latency: the page takes a new colour on a command, CHANGES times; the time until the
#    viewer's canvas first draws it, p50/p90 (node's and the browsers' Date.now(): one clock).
#
# Prints each result and writes them to bench-results/viewer-<UTC time>.json.
#
# Knobs (environment):
#   VIEWERS="0 1 5" SECS=20 WARMUP_SECS=3 CHANGES=50
#   PARTS="cpu latency"
#   CHROME=/usr/lib/chromium/chromium
#   BUILD=1         cargo build --release first (0 to reuse target/release)
#   OUT_DIR=bench-results
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VIEWERS="${VIEWERS:-0 1 5}"
SECS="${SECS:-20}"
WARMUP_SECS="${WARMUP_SECS:-3}"
CHANGES="${CHANGES:-50}"
PARTS="${PARTS:-cpu latency}"
CHROME="${CHROME:-/usr/lib/chromium/chromium}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
CTL="$TARGET_DIR/release/wallcrawler-controller"

log() { printf '[viewer] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -x "$CHROME" ]] || die "no Chromium at $CHROME (scripts/install-test-deps.sh)"
[[ -d tests/node/node_modules ]] || die "run scripts/install-test-deps.sh first"
if [[ "$BUILD" == 1 ]]; then
  log "cargo build --release"
  cargo build --release --locked --bin wallcrawler-controller >&2
fi
[[ -x "$CTL" ]] || die "missing $CTL (run with BUILD=1)"

work="$(mktemp -d "${TMPDIR:-/tmp}/wc-viewer-bench.XXXXXX")"
ctl_pid=""
stop_controller() {
  if [[ -n "$ctl_pid" ]]; then
    kill "$ctl_pid" 2>/dev/null || true
    wait "$ctl_pid" 2>/dev/null || true
    ctl_pid=""
  fi
}
trap 'stop_controller; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
openssl genpkey -algorithm ed25519 -out "$work/key.pem" 2>/dev/null

# Starts `local` on a free port of 127.0.0.1; sets ctl_pid and url.
start_controller() {
  : >"$work/out"
  WALLCRAWLER_JWT_PRIVATE_KEY_FILE="$work/key.pem" RUST_LOG=warn LOG_FORMAT=json \
    "$CTL" local --port 0 --chrome-path "$CHROME" >"$work/out" 2>"$work/log" &
  ctl_pid=$!
  url=""
  for _ in $(seq 1 300); do
    url="$(sed -n 's/^connectUrl: //p' "$work/out")"
    [[ -n "$url" ]] && return
    kill -0 "$ctl_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/log" >&2
  die "local did not print a connectUrl"
}

# Runs one part with N viewers on a fresh controller; prints its JSON line.
measure() {
  local part="$1" n="$2" result
  start_controller
  result="$(cd tests/node && node viewer-bench.mjs --url "$url" --mint "$CTL" \
    --key-file "$work/key.pem" --chrome "$CHROME" --controller-pid "$ctl_pid" --part "$part" \
    --viewers "$n" --secs "$SECS" --warmup-secs "$WARMUP_SECS" --changes "$CHANGES" \
    --timeout-ms $(((SECS + WARMUP_SECS + CHANGES + 90) * 1000)) | tail -1)"
  stop_controller
  [[ "$result" == *'"ok":true'* ]] || die "$part with $n viewers failed: $result"
  echo "$result"
}

mkdir -p "$OUT_DIR"
out="$OUT_DIR/viewer-$(date -u +%Y%m%dT%H%M%SZ).json"
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
results=()
if [[ " $PARTS " == *" cpu "* ]]; then
  for n in $VIEWERS; do
    log "cpu: $n viewer(s), ${SECS} s after ${WARMUP_SECS} s"
    r="$(measure cpu "$n")"
    echo "$r"
    results+=("$r")
  done
fi
if [[ " $PARTS " == *" latency "* ]]; then
  log "latency: $CHANGES colour changes, 1 viewer"
  r="$(measure latency 1)"
  echo "$r"
  results+=("$r")
fi
(IFS=,; printf '[%s]\n' "${results[*]}") >"$out"
log "wrote $out"
