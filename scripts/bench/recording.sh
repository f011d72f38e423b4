#!/usr/bin/env bash
# The recording's cost on the local platform (`wallcrawler-control-plane serve --pool 0`: one
# controller per session), driven by tests/node/recording-bench.mjs (the stock SDK, Puppeteer):
# for each page in PAGES (idle: a still page; anim: a box moving and changing colour 30 times a
# second) and each recordSession in RECORD, one session holds the page SECS seconds after
# WARMUP_SECS; over the hold, CPU seconds per wall second (utime+stime from /proc, with the
# reaped children's) of the session's controller, of its ffmpeg processes and of its Chrome
# (every chromium process below the server; nothing else on the machine is counted); after
# the session, the bytes of recording stored (its segments in the data directory) per minute of
# video.
#
# Run it where Chrome cannot reach the network:
#   unshare --net bash -c 'ip link set lo up; scripts/bench/recording.sh'
#
# Knobs (environment):
#   PAGES="idle anim" RECORD="false true" SECS=20 WARMUP_SECS=3
#   BIN=<dir with wallcrawler-control-plane and wallcrawler-controller>
#       (default: $CARGO_TARGET_DIR/release, else target/release; BUILD=1 builds it)
#   BUILD=0         1: cargo build --release first
#   OUT_DIR=bench-results
#   RUST_LOG=warn   the server's and controllers' log level; LOG_COPY=<file> keeps the log
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PAGES="${PAGES:-idle anim}"
RECORD="${RECORD:-false true}"
SECS="${SECS:-20}"
WARMUP_SECS="${WARMUP_SECS:-3}"
BUILD="${BUILD:-0}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
BIN="${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release}"

log() { printf '[recording] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v ffmpeg >/dev/null || die "no ffmpeg (scripts/install-test-deps.sh)"
[[ -d tests/node/node_modules ]] || die "run scripts/install-test-deps.sh first"
if [[ "$BUILD" == 1 ]]; then
  log "cargo build --release"
  cargo build --release --locked --bin wallcrawler-controller \
    --bin wallcrawler-control-plane >&2
fi
for b in wallcrawler-control-plane wallcrawler-controller; do
  [[ -x "$BIN/$b" ]] || die "missing $BIN/$b (BUILD=1, or BIN=<dir>)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/wc-recording-bench.XXXXXX")"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [[ -n "${LOG_COPY:-}" ]] && cp "$work/log" "$LOG_COPY"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

WALLCRAWLER_CONTROLLER_BIN="$BIN/wallcrawler-controller" RUST_LOG="${RUST_LOG:-warn}" \
  "$BIN/wallcrawler-control-plane" serve --port 0 --data-dir "$work/data" --pool 0 \
  >"$work/out" 2>"$work/log" &
server_pid=$!
for _ in $(seq 1 300); do
  [[ $(wc -l <"$work/out") -ge 3 ]] && break
  sleep 0.1
done
base="$(sed -n 's/^baseURL: //p' "$work/out")"
key="$(sed -n 's/^apiKey: //p' "$work/out")"
project="$(sed -n 's/^projectId: //p' "$work/out")"
[[ -n "$base" ]] || { cat "$work/log" >&2; die "serve did not start"; }

# CPU ticks of this server's controllers, their ffmpeg and their Chrome (descendants of the
# server only: other work on the machine is not counted), as JSON.
ticks() {
  python3 - "$server_pid" <<'EOF'
import json, os, sys
root = int(sys.argv[1])
procs = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        continue
    f = stat[stat.rindex(")") + 2:].split()
    # Own CPU, and that of its children it has reaped (an ffmpeg that ended, a renderer).
    procs[int(pid)] = (int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]), cmd)
def ours(pid):
    seen = 0
    while pid in procs and seen < 64:
        if pid == root:
            return True
        pid, seen = procs[pid][0], seen + 1
    return False
t = {"controller": 0, "ffmpeg": 0, "chrome": 0}
for pid, (_, cpu, reaped, cmd) in procs.items():
    if not ours(pid):
        continue
    name = os.path.basename(cmd)
    if name == "wallcrawler-controller":
        # Its reaped children, while a session is held, are its ffmpeg processes.
        t["controller"] += cpu
        t["ffmpeg"] += reaped
    elif name == "ffmpeg":
        t["ffmpeg"] += cpu
    elif "chromium" in cmd:
        t["chrome"] += cpu + reaped
print(json.dumps(t))
EOF
}

mkdir -p "$OUT_DIR"
out_file="$OUT_DIR/recording-$(date -u +%Y%m%dT%H%M%SZ).json"
hz="$(getconf CLK_TCK)"
results=()
for page in $PAGES; do
  for record in $RECORD; do
    log "page=$page record=$record: $SECS s"
    fifo="$work/fifo-$page-$record"
    mkfifo "$fifo"
    (cd tests/node && exec node recording-bench.mjs --base "$base" --key "$key" \
      --project "$project" --page "$page" --record "$record" --secs "$SECS" \
      --warmup-secs "$WARMUP_SECS") >"$fifo" &
    node_pid=$!
    start="" end="" wall0="" wall1="" last=""
    while IFS= read -r line; do
      case "$line" in
        *'"phase":"start"'*) start="$(ticks)"; wall0="$(date +%s.%N)" ;;
        *'"phase":"end"'*) end="$(ticks)"; wall1="$(date +%s.%N)" ;;
      esac
      last="$line"
    done <"$fifo"
    wait "$node_pid" || die "the bench session failed: $last"
    result="$(python3 - "$start" "$end" "$wall0" "$wall1" "$hz" "$last" "$work/data" \
      "$project" "$page" "$record" <<'EOF'
import json, os, sys
start, end = json.loads(sys.argv[1]), json.loads(sys.argv[2])
wall = float(sys.argv[4]) - float(sys.argv[3])
hz = int(sys.argv[5])
last = json.loads(sys.argv[6])
data, project, page, record = sys.argv[7:11]
cpu = {k: round((end[k] - start[k]) / hz / wall, 4) for k in start}
rec = os.path.join(data, "contexts/files", project, last["sessionId"], "recordings")
seg_bytes = 0
for d, _, files in os.walk(rec):
    seg_bytes += sum(os.path.getsize(os.path.join(d, f)) for f in files if f.endswith(".ts"))
video_ms = sum(p["endTimeMs"] - p["startTimeMs"] for p in last["pages"])
per_min = round(seg_bytes / (video_ms / 60000)) if video_ms else 0
print(json.dumps({"page": page, "recordSession": record == "true", "secs": round(wall, 2),
                  "cpu_per_wall_s": cpu, "pages": len(last["pages"]),
                  "video_s": video_ms / 1000, "segment_bytes": seg_bytes,
                  "bytes_per_minute": per_min}))
EOF
)"
    echo "$result"
    results+=("$result")
  done
done
load="$(cut -d' ' -f1-3 /proc/loadavg)"
printf '{"load_before_end":"%s","nproc":%s,"results":[%s]}\n' "$load" "$(nproc)" \
  "$(IFS=,; echo "${results[*]}")" >"$out_file"
log "load average $load; results in $out_file"
