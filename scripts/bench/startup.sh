#!/usr/bin/env bash
# Start and stop times of `wallcrawler-controller run` (release build):
#
# 1. process start → READY (the JSON log line "session ready") with an empty profile, against
#    Chromium's own start with the controller's exact command line (chrome/flags.conf plus
#    --headless=new, --remote-debugging-address=127.0.0.1, --remote-debugging-port=0, a fresh
#    --user-data-dir, about:blank) → its DevToolsActivePort file, then /json/version answering
#    (polled every 1 ms). RUNS runs each, alternating, after one uncounted warm-up of each;
#    median and p90 of both and the difference (the controller's overhead).
#    `run` is configured with WALLCRAWLER_JWT_PUBLIC_KEY (no table), CDP_PROXY_PORT=0,
#    CHROME_DEBUG_PORT=0, LOG_FORMAT=json, METRICS_ADDR="", KEEP_ALIVE=true.
# 2. SIGTERM → process exit of a `run` with CONTEXTS_DIR and CONTEXT_PERSIST=true whose profile
#    is the generated ~100 MiB one (its archive is put in CONTEXTS_DIR, so `run` hydrates it
#    first); SETTLE seconds after READY; SHUTDOWN_RUNS runs, median. This is the whole
#    shutdown: session cookies over CDP, Browser.close, Chrome's exit, pack + store (fsync).
#    The generated files are look-alikes: Chrome resets the SQLite and LevelDB stores it opens
#    at startup, so about 58 % of the profile is left to save (MIB=175 leaves ~100 MB).
#
# Prints both summaries and writes the JSON to bench-results/startup-<UTC time>.json.
# Everything lives in a temporary directory removed on exit.
#
# Knobs (environment):
#   RUNS=10 SHUTDOWN_RUNS=5 SETTLE=3 MIB=100
#   PARTS="startup shutdown"   which measurements to take
#   CHROME=/usr/lib/chromium/chromium
#   BUILD=1         cargo build --release first (0 to reuse target/release)
#   OUT_DIR=bench-results
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-10}"
SHUTDOWN_RUNS="${SHUTDOWN_RUNS:-5}"
SETTLE="${SETTLE:-3}"
MIB="${MIB:-100}"
PARTS="${PARTS:-startup shutdown}"
CHROME="${CHROME:-/usr/lib/chromium/chromium}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

log() { printf '[startup] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -x "$CHROME" ]] || die "no Chromium at $CHROME (scripts/install-test-deps.sh)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/wc-startup-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

if [[ "$BUILD" == 1 ]]; then
  log "building wallcrawler-controller and the profilebench example (release)"
  cargo build --release --quiet --bin wallcrawler-controller --example profilebench
fi
CTL="$TARGET_DIR/release/wallcrawler-controller"
PB="$TARGET_DIR/release/examples/profilebench"
[[ -x "$CTL" && -x "$PB" ]] || die "missing $CTL or $PB (run without BUILD=0)"

mkdir -p "$OUT_DIR"
OUT="$OUT_DIR/startup-$(date -u +%Y%m%dT%H%M%SZ).json"
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

STARTUP=null
if [[ " $PARTS " == *" startup "* ]]; then
  log "start to READY, $RUNS runs each (empty profile)"
  STARTUP="$("$PB" startup --controller "$CTL" --chrome "$CHROME" --runs "$RUNS" \
    --scratch "$WORK/startup")"
fi

SHUTDOWN=null
if [[ " $PARTS " == *" shutdown "* ]]; then
  log "shutdown with the generated $MIB MiB profile, $SHUTDOWN_RUNS runs"
  "$PB" gen "$WORK/profile" --mib "$MIB" >/dev/null
  "$PB" pack "$WORK/profile" "$WORK/profile.tar.gz" >&2
  rm -rf "$WORK/profile"
  SHUTDOWN="$("$PB" shutdown --controller "$CTL" --chrome "$CHROME" \
    --archive "$WORK/profile.tar.gz" --runs "$SHUTDOWN_RUNS" --settle "$SETTLE" \
    --scratch "$WORK/shutdown")"
fi

printf '{"startup":%s,"shutdown":%s}\n' "$STARTUP" "$SHUTDOWN" >"$OUT"
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
log "JSON: $OUT"
