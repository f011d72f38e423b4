#!/usr/bin/env bash
# The session lifecycle as users meet it, on the local platform (release build): RUNS sequential
# sessions with the stock Browserbase SDK and Playwright (tests/node/lifecycle-bench.mjs) —
# create → connectOverCDP(connectUrl) → goto a small page on 127.0.0.1 → release — with a warm
# pool and without one. Prints p50/p90 per step and for the whole, and writes the JSON to
# bench-results/lifecycle-<UTC time>.json.
#
# For each pool size in POOLS, `wallcrawler-control-plane serve --pool N` starts on a free port
# of 127.0.0.1 with a fresh data directory; with N > 0 the runs start once N controllers are
# warm. WARMUP uncounted sessions come first.
#
# Knobs (environment):
#   RUNS=20 WARMUP=2 POOLS="2 0"
#   PAUSE_MS=0   pause between sessions (outside the timings); 0 = back to back
#   SETTINGS=''  JSON merged into every create (e.g. '{"browserSettings":{"viewport":
#                {"width":1288,"height":711},"fingerprint":{"locales":["de-DE"]}}}')
#   BUILD=1      cargo build --release first (0 to reuse target/release)
#   OUT_DIR=bench-results
#   LOG_DIR=''   keep each server's log there (log-<pool>: serve, its gateway and controllers);
#                with WALLCRAWLER_CONTROLLER_LOG=debug the controllers' and the gateway's
#                debug lines too (where a connect's time goes)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-20}"
WARMUP="${WARMUP:-2}"
POOLS="${POOLS:-2 0}"
PAUSE_MS="${PAUSE_MS:-0}"
SETTINGS="${SETTINGS:-}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
LOG_DIR="${LOG_DIR:-}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET_DIR/release"

if [[ "$BUILD" == 1 ]]; then
  echo "[lifecycle] cargo build --release" >&2
  cargo build --release --locked -p wallcrawler-controller -p wallcrawler-control-plane \
    --bin wallcrawler-controller --bin wallcrawler-control-plane >&2
fi
for b in wallcrawler-controller wallcrawler-control-plane; do
  [[ -x "$BIN/$b" ]] || { echo "missing $BIN/$b (run with BUILD=1)" >&2; exit 1; }
done
[[ -d tests/node/node_modules ]] || { echo "run scripts/install-test-deps.sh first" >&2; exit 1; }

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Starts `serve --pool $1`; sets base, key, project, server_pid.
start_server() {
  local pool="$1" data="$work/data-$1"
  # The bench's page is served on this machine's loopback, which pages may not reach by default.
  EGRESS_ALLOW=127.0.0.1 WALLCRAWLER_CONTROLLER_BIN="$BIN/wallcrawler-controller" RUST_LOG="${RUST_LOG:-info}" \
    "$BIN/wallcrawler-control-plane" serve --port 0 --data-dir "$data" --pool "$pool" \
    >"$work/out-$pool" 2>"$work/log-$pool" &
  server_pid=$!
  for _ in $(seq 1 300); do
    [[ $(wc -l <"$work/out-$pool") -ge 3 ]] && break
    sleep 0.1
  done
  base="$(sed -n 's/^baseURL: //p' "$work/out-$pool")"
  key="$(sed -n 's/^apiKey: //p' "$work/out-$pool")"
  project="$(sed -n 's/^projectId: //p' "$work/out-$pool")"
  [[ -n "$base" ]] || { echo "serve did not start:" >&2; cat "$work/log-$pool" >&2; exit 1; }
  if (( pool > 0 )); then
    for _ in $(seq 1 300); do
      [[ $(grep -c "warm; waiting for a claim" "$work/log-$pool" || true) -ge "$pool" ]] && return
      sleep 0.1
    done
    echo "the pool did not warm up:" >&2; tail -20 "$work/log-$pool" >&2; exit 1
  fi
}

stop_server() {
  kill "$server_pid"; wait "$server_pid" || true; server_pid=""
  if [[ -n "$LOG_DIR" ]]; then mkdir -p "$LOG_DIR" && cp "$work/log-$1" "$LOG_DIR/log-$1"; fi
}

mkdir -p "$OUT_DIR"
out="$OUT_DIR/lifecycle-$(date -u +%Y%m%dT%H%M%SZ).json"
echo "{" >"$out"
first=1
for pool in $POOLS; do
  start_server "$pool"
  echo "[lifecycle] pool=$pool: $RUNS sessions after $WARMUP warm-up, ${PAUSE_MS} ms apart" >&2
  result="$(cd tests/node && node lifecycle-bench.mjs --base "$base" --key "$key" --project "$project" \
    --runs "$RUNS" --warmup "$WARMUP" --pause-ms "$PAUSE_MS" ${SETTINGS:+--settings "$SETTINGS"} | tail -1)"
  stop_server "$pool"
  echo "$result" | grep -q '"ok":true' || { echo "bench failed: $result" >&2; exit 1; }
  [[ $first == 1 ]] || echo "," >>"$out"
  first=0
  printf '"pool=%s": %s\n' "$pool" "$result" >>"$out"
  # shellcheck disable=SC2016 # JavaScript template literals, not shell expansions
  node -e '
    const r = JSON.parse(process.argv[1]);
    console.log(`pool=${process.argv[2]}  (ms)      p50      p90      min      max`);
    for (const [step, s] of Object.entries(r.ms)) {
      console.log(`  ${step.padEnd(16)}${[s.p50, s.p90, s.min, s.max].map((v) => String(v).padStart(9)).join("")}`);
    }' "$result" "$pool"
done
echo "}" >>"$out"
echo "[lifecycle] wrote $out" >&2
