#!/usr/bin/env bash
# What the session log costs the relay, in instructions per message (Step 18: at most 10 %
# more than the relay without it). CPU time per message on two shared cores moves by ±20 %
# between runs, more than the effect measured; valgrind's instruction count does not move
# (the same binary and input give the same count whatever the other core is doing).
#
# Runs the relay bench (benches/relay.rs) in its count-only mode under
# `valgrind --tool=callgrind --separate-threads=yes`: one proxy in front of an echo upstream,
# N round trips of a 256-byte `Runtime.evaluate` over one connection, with the session
# logged (the tap on the relay thread, the writer on the bench's runtime storing nowhere)
# and not. Each mode runs at N1 and N2 round trips; the difference divided by the messages
# between them (2 per round trip) cancels start-up. Prints, per message:
#   relay thread   the relay thread's instructions (the tap's copy lands here)
#   process        every thread (bench client, echo, relay, the log's writer)
# and the log's cost: process(on) - process(off), against relay(off).
#
# Instructions in user space only: the relay's syscalls (its larger cost) are not counted,
# so the percentage is an upper bound of the CPU share.
#
# Knobs: N1=2000 N2=6000  BUILD=1 (cargo bench --no-run first; 0 reuses the last build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
N1="${N1:-2000}"
N2="${N2:-6000}"
BUILD="${BUILD:-1}"
command -v valgrind >/dev/null || { echo "error: valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
exe=$(cargo bench --bench relay --no-run --message-format=json 2>/dev/null \
  | jq -r 'select(.reason == "compiler-artifact" and .target.name == "relay") | .executable' | tail -1)
[[ "$BUILD" == 1 || -x "$exe" ]] || { echo "error: no relay bench binary" >&2; exit 2; }
[[ -x "$exe" ]] || { echo "error: the relay bench did not build" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# count MODE N -> "relay process" instructions
count() {
  local dir="$work/$1-$2"
  mkdir -p "$dir"
  RELAY_LOG="$1" RELAY_LOG_ROUND_TRIPS="$2" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$dir/cg.out" "$exe" >/dev/null 2>"$dir/valgrind.log"
  local relay=0 all=0 f n
  for f in "$dir"/cg.out-*; do
    n=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
    all=$((all + n))
    # Thread 01 is the bench's own (client, echo, the proxy's accept, the log's writer); the
    # one other thread is the proxy's relay thread.
    [[ "$f" == *-01 ]] || relay=$((relay + n))
  done
  echo "$relay $all"
}

declare -A R A
for mode in off on; do
  for n in "$N1" "$N2"; do
    read -r r a < <(count "$mode" "$n")
    R[$mode-$n]=$r A[$mode-$n]=$a
  done
done
msgs=$((2 * (N2 - N1)))
per() { awk -v a="$1" -v b="$2" -v m="$msgs" 'BEGIN {printf "%.0f", (b - a) / m}'; }
relay_off=$(per "${R[off-$N1]}" "${R[off-$N2]}")
relay_on=$(per "${R[on-$N1]}" "${R[on-$N2]}")
all_off=$(per "${A[off-$N1]}" "${A[off-$N2]}")
all_on=$(per "${A[on-$N1]}" "${A[on-$N2]}")
printf '%-8s %14s %14s   (instructions per message, %d messages)\n' mode "relay thread" process "$msgs"
printf '%-8s %14s %14s\n' off "$relay_off" "$all_off" on "$relay_on" "$all_on"
awk -v on="$all_on" -v off="$all_off" -v r="$relay_off" \
  'BEGIN {printf "session log cost: %d instructions per message, %.1f %% of the relay thread'"'"'s %d\n", on - off, 100 * (on - off) / r, r}'
