#!/usr/bin/env bash
# Bursts of connections from one address through `wallcrawler-controller proxy` (release
# build, default limits, token checked on every upgrade) in front of the raw WebSocket echo
# upstream, measured by `wsload burst`: how many upgrades are refused. Scenarios:
#   - concurrent: 200 connections, 50 being set up at a time;
#   - idle-1000:  1,000 connections, 50 at a time, all held idle until the last is up;
#   - at-once:    1,000 connections all connecting at the same moment, held likewise.
# Each connection sends its upgrade request as soon as it is connected. A refusal (503) is
# the pending budget evicting a connection that had not authenticated yet.
#
# Prints one JSON line per round and scenario. Everything listens on 127.0.0.1, every loop is
# bounded, and every process started here is stopped on exit.
#
# Knobs (environment):
#   ROUNDS=3            rounds of each scenario
#   BUILD=1             cargo build --release first (0 to reuse the release build)
#   CTL=PATH            the wallcrawler-controller binary measured as "proxy" (default: the
#                       release build)
#   PROXY_B=PATH        also run the scenarios against this wallcrawler-controller binary
#                       (e.g. a build from before a change), alternating with the current one
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-3}"
BUILD="${BUILD:-1}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SESSION="sess_bench"

log() { printf '[burst] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

if [[ "$BUILD" == 1 ]]; then
  log "building release binaries"
  cargo build --release --quiet --bin wallcrawler-controller --example wsload
fi
CTL="${CTL:-$TARGET_DIR/release/wallcrawler-controller}"
WSLOAD="$TARGET_DIR/release/examples/wsload"
[[ -x "$CTL" && -x "$WSLOAD" ]] || die "missing $CTL or $WSLOAD (run without BUILD=0)"

# The load generator, the proxy and the upstream each hold up to 1,000 connections.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
(( $(ulimit -n) > 4000 )) || die "open-file limit $(ulimit -n) is too low"

TMP="$(mktemp -d -t wallcrawler-burst.XXXXXX)"
# The token key pair: controllers and gateways get the public key only; `token` signs.
KEY_FILE="$TMP/token-key.pem"
(umask 077 && openssl genpkey -algorithm ed25519 -out "$KEY_FILE")
PUBLIC_KEY="$(openssl pkey -in "$KEY_FILE" -pubout)"
STARTED=()
cleanup() {
  local rc=$?
  for pid in "${STARTED[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${STARTED[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if (( rc != 0 )); then
    for f in "$TMP"/proxy-*.log; do [[ -s "$f" ]] && { log "--- $f"; tail -n 20 "$f" >&2; }; done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$WSLOAD" echo-server --listen 127.0.0.1:0 --port-file "$TMP/echo.port" --exit-after-secs 900 &
STARTED+=($!)
for _ in $(seq 100); do [[ -s "$TMP/echo.port" ]] && break; sleep 0.05; done
[[ -s "$TMP/echo.port" ]] || die "echo upstream did not start"
ECHO_ADDR="127.0.0.1:$(cat "$TMP/echo.port")"

declare -A ADDRS
start_proxy() { # NAME BINARY
  local addr
  addr="127.0.0.1:$("$WSLOAD" free-port)"
  SESSION_ID="$SESSION" WALLCRAWLER_JWT_PUBLIC_KEY="$PUBLIC_KEY" METRICS_ADDR="" LOG_FORMAT=text RUST_LOG=warn \
    "$2" proxy --listen "$addr" --upstream "$ECHO_ADDR" 2>"$TMP/proxy-$1.log" &
  STARTED+=($!)
  "$WSLOAD" wait-port "$addr" || die "proxy $1 did not start"
  ADDRS[$1]="$addr"
}
NAMES=(proxy)
start_proxy proxy "$CTL"
if [[ -n "${PROXY_B:-}" ]]; then
  [[ -x "$PROXY_B" ]] || die "PROXY_B=$PROXY_B is not an executable"
  start_proxy proxy-B "$PROXY_B"
  NAMES+=(proxy-B)
fi
TOKEN="$(WALLCRAWLER_JWT_PRIVATE_KEY_FILE="$KEY_FILE" "$CTL" token --session-id "$SESSION")"

REV="unknown (not a git checkout)"
if git rev-parse --git-dir >/dev/null 2>&1; then
  REV="$(git rev-parse --short HEAD)"
  git diff --quiet HEAD -- src crates || REV="$REV (src or crates modified)"
fi
echo "# wallcrawler connection bursts, $(date -u +%Y%m%dT%H%M%SZ), commit $REV, $(nproc) CPUs"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for scenario in "concurrent 200 50" "idle-1000 1000 50" "at-once 1000 1000"; do
    read -r name conns concurrency <<<"$scenario"
    for target in "${NAMES[@]}"; do
      printf '{"target":"%s","scenario":"%s","line":' "$target" "$name"
      timeout 120 "$WSLOAD" burst --target "${ADDRS[$target]}" \
        --path "/devtools/page/bench?signingKey=$TOKEN" \
        --conns "$conns" --concurrency "$concurrency" | tr -d '\n'
      echo "}"
    done
  done
  log "round $round of $ROUNDS done"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
