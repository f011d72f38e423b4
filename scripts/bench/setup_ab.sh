#!/usr/bin/env bash
# Connection setup of two `wallcrawler-controller proxy` builds, A/B: both in front of one
# WebSocket echo upstream, measured by `wsload compare` in turns (setup only: TCP connect +
# authenticated upgrade + 101), RUNS times with the two builds' order swapped every run. Prints
# each run's p50s and the mean difference B - A with its standard error: the setup row of
# compare.sh moves by several µs between runs, a difference of one µs needs this. Half the
# runs start A's process first, half B's.
#
#   scripts/bench/setup_ab.sh OLD_BINARY NEW_BINARY        # B = NEW_BINARY
#   RUNS=10 SAMPLES=3000 scripts/bench/setup_ab.sh A B
#
# Uses target/release/examples/wsload (cargo build --release --examples). Everything listens
# on 127.0.0.1; the proxies run on CPU 1, the load generator and echo upstream on CPU 0, as in
# compare.sh. Each run opens about 4 x SAMPLES connections: their TIME_WAIT entries count
# against the connection-tracking table, so keep RUNS x SAMPLES in the tens of thousands.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WSLOAD="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/wsload"
RUNS="${RUNS:-10}"
SAMPLES="${SAMPLES:-3000}"

die() { printf '[setup_ab] %s\n' "$*" >&2; exit 1; }
(( $# == 2 )) || die "usage: scripts/bench/setup_ab.sh A_BINARY B_BINARY"
A="$1" B="$2"
for f in "$A" "$B" "$WSLOAD"; do [[ -x "$f" ]] || die "not an executable: $f"; done
PIN_LOAD=() PIN_PROXY=()
if (( $(nproc) >= 2 )); then PIN_LOAD=(taskset -c 0) PIN_PROXY=(taskset -c 1); fi

TMP="$(mktemp -d -t wallcrawler-setup-ab.XXXXXX)"
# The token key pair: controllers and gateways get the public key only; `token` signs.
KEY_FILE="$TMP/token-key.pem"
(umask 077 && openssl genpkey -algorithm ed25519 -out "$KEY_FILE")
PUBLIC_KEY="$(openssl pkey -in "$KEY_FILE" -pubout)"
STARTED=()
PROXIES=()
cleanup() {
  for pid in "${STARTED[@]}" "${PROXIES[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${STARTED[@]}" "${PROXIES[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${PIN_LOAD[@]}" "$WSLOAD" echo-server --listen 127.0.0.1:0 --port-file "$TMP/echo.port" \
  --exit-after-secs 3600 &
STARTED+=($!)
for _ in $(seq 100); do [[ -s "$TMP/echo.port" ]] && break; sleep 0.05; done
[[ -s "$TMP/echo.port" ]] || die "echo upstream did not start"
UPSTREAM="127.0.0.1:$(cat "$TMP/echo.port")"

start_proxy() { # BINARY NAME; adds NAME=ADDR@PID to TARGETS
  local addr
  addr="127.0.0.1:$("$WSLOAD" free-port)"
  SESSION_ID=sess_bench WALLCRAWLER_JWT_PUBLIC_KEY="$PUBLIC_KEY" METRICS_ADDR="" RUST_LOG=warn \
    "${PIN_PROXY[@]}" "$1" proxy --listen "$addr" --upstream "$UPSTREAM" 2>>"$TMP/$2.log" &
  PROXIES+=($!)
  "$WSLOAD" wait-port "$addr"
  TARGETS[$2]="$2=$addr@$!"
}
stop_proxies() {
  for pid in "${PROXIES[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  PROXIES=()
}
TOKEN="$(WALLCRAWLER_JWT_PRIVATE_KEY_FILE="$KEY_FILE" "$A" token --session-id sess_bench)"

p50() { # TARGET... ; prints the p50 of each target, in the order given
  "${PIN_LOAD[@]}" "$WSLOAD" compare "${@/#/--target=}" --path "/?signingKey=$TOKEN" \
    --secs 0.2 --rounds 1 --rtt-samples 10 --setup-samples "$SAMPLES" --idle-conns 0 \
    --conns 1 --message-bytes 1024 2>/dev/null | awk '/^setup p50/ { $1=$2=$3=$4=""; print }'
}
# Which process starts first shifts the result by up to a µs either way, so half the runs
# start A first and half B; within each half the targets' turns alternate too.
declare -A TARGETS
PROXIES=()
for run in $(seq "$RUNS"); do
  if (( run == 1 )); then
    start_proxy "$A" A; start_proxy "$B" B
  elif (( run == RUNS / 2 + 1 )); then
    stop_proxies; start_proxy "$B" B; start_proxy "$A" A
  fi
  if (( run % 2 )); then
    read -r a b < <(p50 "${TARGETS[A]}" "${TARGETS[B]}")
  else
    read -r b a < <(p50 "${TARGETS[B]}" "${TARGETS[A]}")
  fi
  [[ -n "${a:-}" && -n "${b:-}" ]] || die "run $run measured nothing (logs: $TMP)"
  awk -v r="$run" -v a="$a" -v b="$b" \
    'BEGIN { printf "run %2d  A %7.1f  B %7.1f  B-A %+6.1f µs\n", r, a, b, b - a }' |
    tee -a "$TMP/runs"
done
awk -v samples="$SAMPLES" '{ d = $8; s += d; ss += d * d; n++ }
  END { m = s / n; sd = sqrt(ss / n - m * m)
        printf "setup p50, B - A: mean %+.2f µs, sd %.2f, standard error %.2f (%d runs of %d setups)\n",
          m, sd, sd / sqrt(n), n, samples }' "$TMP/runs"
