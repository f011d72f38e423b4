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
#   CPU=1        count the CPU time the platform (serve, its gateway, controllers, Chromes,
#                ffmpeg) and the client (node) spend while the sessions run, each in a cgroup
#                of its own (cgroup v1 cpuacct or v2 cpu.stat; needs root): core-seconds per
#                session, printed and in the JSON ("cpu"). 0, or no cgroup to make: off.
#                CPU=detail also samples the platform's processes (cpu_by_process.py: by
#                kind, Chrome's by process type; the sampling itself takes some CPU)
#   CHROME_PATH='' the browser binary (serve passes it to its controllers; empty: Debian's
#                chromium), e.g. /usr/lib/chromium/chromium-headless-shell, the lighter
#                browser of docs/operating.md; named in the JSON ("browser")
#   IDLE_SECS=0  with CPU accounting and N > 0: first count what the warm pool spends over
#                this many seconds with nobody connected, 5 s after it is warm (ms of CPU per
#                second, printed and in the JSON as "idleCpuMsPerSecond")
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
CPU="${CPU:-1}"
IDLE_SECS="${IDLE_SECS:-0}"
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
cgroups=()
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  # What outlived serve in its cgroup (Chrome's crash handlers, reparented) is ended first.
  for g in "${cgroups[@]}"; do
    rmdir "$g" 2>/dev/null && continue
    xargs -r kill <"$g/cgroup.procs" 2>/dev/null || true
    for _ in $(seq 1 20); do rmdir "$g" 2>/dev/null && break; sleep 0.1; done
  done
  rm -rf "$work"
}
trap cleanup EXIT

# CPU accounting: a cgroup for the platform and one for the client, under the first hierarchy
# that lets us make them (v1 cpuacct, else v2, mounted alone or beside v1 as "unified").
cg_platform="" cg_client=""
if [[ "$CPU" == 1 || "$CPU" == detail ]]; then
  for root in /sys/fs/cgroup/cpuacct /sys/fs/cgroup /sys/fs/cgroup/unified; do
    if [[ -f "$root/cpuacct.usage" || -f "$root/cgroup.controllers" ]] \
      && mkdir "$root/wc-lifecycle-$$-platform" "$root/wc-lifecycle-$$-client" 2>/dev/null; then
      cg_platform="$root/wc-lifecycle-$$-platform" cg_client="$root/wc-lifecycle-$$-client"
      cgroups=("$cg_platform" "$cg_client")
      break
    fi
  done
  [[ -n "$cg_platform" ]] || echo "[lifecycle] no cgroup could be made: CPU time not counted" >&2
fi
# Nanoseconds of CPU the processes of cgroup $1 have used ("" without accounting).
cg_ns() {
  [[ -n "$1" ]] || return 0
  if [[ -f "$1/cpuacct.usage" ]]; then cat "$1/cpuacct.usage"; else awk '/^usage_usec/ {print $2 "000"}' "$1/cpu.stat"; fi
}
# Becomes "$@" inside cgroup $1 (as it is without one). It execs: call it in a subshell (in
# the background, a pipeline, a command substitution), whose pid is then the command's.
in_cgroup() {
  local g="$1"; shift
  if [[ -n "$g" ]]; then
    exec bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$g" "$@"
  fi
  exec "$@"
}

# Starts `serve --pool $1`; sets base, key, project, server_pid.
start_server() {
  local pool="$1" data="$work/data-$1"
  # The bench's page is served on this machine's loopback, which pages may not reach by default.
  EGRESS_ALLOW=127.0.0.1 WALLCRAWLER_CONTROLLER_BIN="$BIN/wallcrawler-controller" RUST_LOG="${RUST_LOG:-info}" \
    in_cgroup "$cg_platform" "$BIN/wallcrawler-control-plane" serve --port 0 --data-dir "$data" --pool "$pool" \
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
  echo "[lifecycle] pool=$pool: $RUNS sessions after $WARMUP warm-up, ${PAUSE_MS} ms apart, browser ${CHROME_PATH:-chromium}" >&2
  sampler=""
  if [[ "$CPU" == detail && -n "$cg_platform" ]]; then
    python3 "$ROOT/scripts/bench/cpu_by_process.py" "$cg_platform" "$work/by-process-$pool.json" &
    sampler=$!
  fi
  idle=""
  if (( IDLE_SECS > 0 && pool > 0 )) && [[ -n "$cg_platform" ]]; then
    sleep 5 # a fresh Chrome's own work after its start (a few seconds) is not the pool's idling
    i0="$(cg_ns "$cg_platform")"
    sleep "$IDLE_SECS" # the measuring window: nobody is connected
    idle="$(( ($(cg_ns "$cg_platform") - i0) / IDLE_SECS / 1000000 ))"
    echo "[lifecycle] pool=$pool idle: $idle ms of CPU per second over ${IDLE_SECS} s" >&2
  fi
  p0="$(cg_ns "$cg_platform")" c0="$(cg_ns "$cg_client")"
  result="$(cd tests/node && in_cgroup "$cg_client" node lifecycle-bench.mjs --base "$base" --key "$key" --project "$project" \
    --runs "$RUNS" --warmup "$WARMUP" --pause-ms "$PAUSE_MS" ${SETTINGS:+--settings "$SETTINGS"} | tail -1)"
  p1="$(cg_ns "$cg_platform")" c1="$(cg_ns "$cg_client")"
  if [[ -n "$sampler" ]]; then kill -TERM "$sampler"; wait "$sampler" || true; fi
  stop_server "$pool"
  echo "$result" | grep -q '"ok":true' || { echo "bench failed: $result" >&2; exit 1; }
  result="$(jq -c --arg b "${CHROME_PATH:-chromium}" '. + {browser: $b}' <<<"$result")"
  if [[ -n "$cg_platform" ]]; then
    # From the first session's create to the last one's release, warm-up sessions included:
    # each session's share of its warm-up (the pool refills at every claim), of the session
    # and of closing its browser, less the closes still running at the end.
    result="$(jq -c --argjson p "$((p1 - p0))" --argjson c "$((c1 - c0))" --argjson n "$((RUNS + WARMUP))" \
      '. + {cpu: {sessions: $n, platformSecondsPerSession: (($p / $n / 1e6 | round) / 1e3),
                 clientSecondsPerSession: (($c / $n / 1e6 | round) / 1e3)}}' <<<"$result")"
    if [[ -n "$idle" ]]; then
      result="$(jq -c --argjson i "$idle" '.cpu.idleCpuMsPerSecond = $i' <<<"$result")"
    fi
    if [[ -f "$work/by-process-$pool.json" ]]; then
      result="$(jq -c --slurpfile b "$work/by-process-$pool.json" '.cpu.byProcess = $b[0]' <<<"$result")"
    fi
  fi
  [[ $first == 1 ]] || echo "," >>"$out"
  first=0
  printf '"pool=%s": %s\n' "$pool" "$result" >>"$out"
  # shellcheck disable=SC2016 # JavaScript template literals, not shell expansions
  node -e '
    const r = JSON.parse(process.argv[1]);
    console.log(`pool=${process.argv[2]}  (ms)      p50      p90      min      max`);
    for (const [step, s] of Object.entries(r.ms)) {
      console.log(`  ${step.padEnd(16)}${[s.p50, s.p90, s.min, s.max].map((v) => String(v).padStart(9)).join("")}`);
    }
    if (r.cpu) {
      console.log(`  cpu per session: platform ${r.cpu.platformSecondsPerSession} s, client ${r.cpu.clientSecondsPerSession} s (core-seconds, ${r.cpu.sessions} sessions)`);
      for (const [k, v] of Object.entries(r.cpu.byProcess ?? {})) {
        console.log(`    ${k.padEnd(34)}${String((v.cpuSeconds / r.cpu.sessions).toFixed(3)).padStart(7)} s  (${v.processes} processes)`);
      }
    }' "$result" "$pool"
done
echo "}" >>"$out"
echo "[lifecycle] wrote $out" >&2
