#!/usr/bin/env bash
# Profile archive throughput end to end through the library (task::persist_profile and
# task::hydrate, as `run` calls them), with the generated ~100 MiB Chrome profile
# (benches/support/profile_gen.rs), against
#   (a) a local directory store (DirectoryArchives: async file write, fsync, rename), and
#   (b) S3 as spoken by a local moto server (S3Archives: the real SDK, multipart upload),
# once on 1 CPU and once on 2 CPUs (taskset; the measuring process only, moto is not pinned).
# Prints MB/s of profile data (uncompressed bytes; MB = 10^6) for persist and hydrate, the
# median of RUNS runs, and writes the JSON lines to bench-results/profile-<UTC time>.jsonl.
#
# Everything lives in a temporary directory removed on exit; moto listens on 127.0.0.1 on a free
# port and is stopped on exit.
#
# Knobs (environment):
#   RUNS=5          persist + hydrate rounds per configuration
#   MIB=100         archived profile data, MiB
#   CPUS="1 2"      CPU counts to measure (each ≤ nproc)
#   S3=1            also measure against moto (0 to skip)
#   BUILD=1         cargo build --release --example profilebench first (0 to reuse)
#   OUT_DIR=bench-results
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-5}"
MIB="${MIB:-100}"
CPUS="${CPUS:-1 2}"
S3="${S3:-1}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
MOTO="$ROOT/.venv/bin/moto_server"

log() { printf '[profile] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/wc-profile-bench.XXXXXX")"
MOTO_PID=""
cleanup() {
  if [[ -n "$MOTO_PID" ]]; then
    kill "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ "$BUILD" == 1 ]]; then
  log "building the profilebench example (release)"
  cargo build --release --quiet --example profilebench
fi
PB="$TARGET_DIR/release/examples/profilebench"
[[ -x "$PB" ]] || die "missing $PB (run without BUILD=0)"

log "generating the profile ($MIB MiB of archived data, seed 42)"
"$PB" gen "$WORK/profile" --mib "$MIB" --ratios >&2

ENDPOINT=""
if [[ "$S3" == 1 ]]; then
  [[ -x "$MOTO" ]] || die "moto is not installed: run scripts/install-test-deps.sh (or S3=0)"
  "$MOTO" -H 127.0.0.1 -p 0 >"$WORK/moto.log" 2>&1 &
  MOTO_PID=$!
  for _ in $(seq 1 300); do
    ENDPOINT="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/moto.log" | head -n1 || true)"
    [[ -n "$ENDPOINT" ]] && break
    kill -0 "$MOTO_PID" 2>/dev/null || die "moto exited: $(cat "$WORK/moto.log")"
    sleep 0.1
  done
  [[ -n "$ENDPOINT" ]] || die "moto did not print its address in 30 s"
  log "moto at $ENDPOINT (pid $MOTO_PID)"
fi

mkdir -p "$OUT_DIR"
OUT="$OUT_DIR/profile-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
NPROC="$(nproc)"
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $CPUS; do
  if (( n > NPROC )); then
    log "skipping $n CPUs (only $NPROC)"
    continue
  fi
  PIN=(taskset -c "0-$((n - 1))")
  "${PIN[@]}" "$PB" throughput --profile "$WORK/profile" --store "dir:$WORK/store" \
    --scratch "$WORK/scratch" --runs "$RUNS" --label "directory, $n CPU" >>"$OUT"
  if [[ "$S3" == 1 ]]; then
    "${PIN[@]}" "$PB" throughput --profile "$WORK/profile" --store "s3:profile-bench" \
      --endpoint "$ENDPOINT" --scratch "$WORK/scratch" --runs "$RUNS" \
      --label "moto S3, $n CPU" >>"$OUT"
  fi
done
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
log "JSON: $OUT"
