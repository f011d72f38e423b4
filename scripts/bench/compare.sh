#!/usr/bin/env bash
# Relay benchmark across processes, in one run, against one upstream: a raw WebSocket echo
# server (examples/wsload.rs echo-server) reached
#   - directly (the baseline),
#   - through `wallcrawler-controller proxy` (release build, token checked on every upgrade),
#   - through nginx (worker_processes 1, a minimal WebSocket reverse proxy; once with its
#     default 4 KiB relay buffers, once with 256 KiB ones, the size the proxy reads with),
# measured by `wsload compare`: 1 MiB echo throughput and the relay's CPU per message, 256 B
# round-trip latency, connection setup, and RSS with idle connections held.
#
# Prints a table and writes it, with JSON, to bench-results/ (gitignored). Everything listens
# on 127.0.0.1, every loop is bounded, and every process started here is stopped on exit.
#
# Knobs (environment):
#   PIN=auto|1|0        pin the relays (proxy, nginx) to CPU 1 and the load generator and echo
#                       upstream to CPU 0; auto = when there are at least 2 CPUs (default auto)
#   SECS=5 ROUNDS=3     throughput seconds per target per round, and rounds
#   CONNS=4             connections streaming 1 MiB messages at once
#   RTT_SAMPLES=20000 SETUP_SAMPLES=2000 IDLE_CONNS=1000
#   FRESH_TOKENS=1      also measure setups each presenting a token minted for it alone (the
#                       proxy's verified-token cache cannot answer those; the same-token row
#                       is a client reconnecting), in turns with the same-token ones; 0 = off
#   BUILD=1             cargo build --release first (0 to reuse target/release)
#   PROXY_B=PATH        also measure this wallcrawler-controller binary (target "proxy-B",
#                       started the same way), e.g. a build from before a relay change
#   OUT_DIR=bench-results
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PIN="${PIN:-auto}"
SECS="${SECS:-5}"
ROUNDS="${ROUNDS:-3}"
CONNS="${CONNS:-4}"
RTT_SAMPLES="${RTT_SAMPLES:-20000}"
SETUP_SAMPLES="${SETUP_SAMPLES:-2000}"
IDLE_CONNS="${IDLE_CONNS:-1000}"
BUILD="${BUILD:-1}"
FRESH_TOKENS="${FRESH_TOKENS:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
SESSION="sess_bench"

log() { printf '[compare] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ -x "$NGINX" ]] || die "nginx not found (apt-get install -y nginx-light, or scripts/install-test-deps.sh)"
if [[ "$BUILD" == 1 ]]; then
  log "building release binaries"
  cargo build --release --quiet --bin wallcrawler-controller --examples
fi
CTL="$TARGET_DIR/release/wallcrawler-controller"
WSLOAD="$TARGET_DIR/release/examples/wsload"
[[ -x "$CTL" && -x "$WSLOAD" ]] || die "missing $CTL or $WSLOAD (run without BUILD=0)"

LOAD_CPU=()
RELAY_CPU=()
pinned="no"
if [[ "$PIN" == 1 || ("$PIN" == auto && $(nproc) -ge 2) ]]; then
  LOAD_CPU=(taskset -c 0)
  RELAY_CPU=(taskset -c 1)
  pinned="relays on CPU 1, load generator + echo upstream on CPU 0"
fi

# Three processes hold IDLE_CONNS connections each at the end.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
(( $(ulimit -n) > 3 * IDLE_CONNS + 100 )) || die "open-file limit $(ulimit -n) is too low for IDLE_CONNS=$IDLE_CONNS"

TMP="$(mktemp -d -t wallcrawler-bench.XXXXXX)"
# The token key pair: controllers and gateways get the public key only; `token` signs.
KEY_FILE="$TMP/token-key.pem"
(umask 077 && openssl genpkey -algorithm ed25519 -out "$KEY_FILE")
PUBLIC_KEY="$(openssl pkey -in "$KEY_FILE" -pubout)"
chmod 755 "$TMP" # nginx workers run as an unprivileged user
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
    for f in "$TMP"/proxy.log "$TMP"/proxy-b.log "$TMP"/nginx/error.log "$TMP"/nginx-big/error.log; do
      [[ -s "$f" ]] && { log "--- $f"; tail -n 20 "$f" >&2; }
    done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- echo upstream -----------------------------------------------------------------------
"${LOAD_CPU[@]}" "$WSLOAD" echo-server --listen 127.0.0.1:0 --port-file "$TMP/echo.port" --exit-after-secs 900 &
STARTED+=($!)
for _ in $(seq 100); do [[ -s "$TMP/echo.port" ]] && break; sleep 0.05; done
[[ -s "$TMP/echo.port" ]] || die "echo upstream did not start"
ECHO_ADDR="127.0.0.1:$(cat "$TMP/echo.port")"

# --- the proxy ---------------------------------------------------------------------------
PROXY_ADDR="127.0.0.1:$("$WSLOAD" free-port)"
SESSION_ID="$SESSION" WALLCRAWLER_JWT_PUBLIC_KEY="$PUBLIC_KEY" METRICS_ADDR="" LOG_FORMAT=text RUST_LOG=warn \
  "${RELAY_CPU[@]}" "$CTL" proxy --listen "$PROXY_ADDR" --upstream "$ECHO_ADDR" 2>"$TMP/proxy.log" &
PROXY_PID=$!
STARTED+=("$PROXY_PID")

PROXY_B_TARGET=()
if [[ -n "${PROXY_B:-}" ]]; then
  [[ -x "$PROXY_B" ]] || die "PROXY_B=$PROXY_B is not an executable"
  PROXY_B_ADDR="127.0.0.1:$("$WSLOAD" free-port)"
  SESSION_ID="$SESSION" WALLCRAWLER_JWT_PUBLIC_KEY="$PUBLIC_KEY" METRICS_ADDR="" LOG_FORMAT=text RUST_LOG=warn \
    "${RELAY_CPU[@]}" "$PROXY_B" proxy --listen "$PROXY_B_ADDR" --upstream "$ECHO_ADDR" 2>"$TMP/proxy-b.log" &
  STARTED+=($!)
  PROXY_B_TARGET=(--target "proxy-B=$PROXY_B_ADDR@$!")
fi

# --- nginx -------------------------------------------------------------------------------
# Two nginx processes, each one worker like the proxy's one pinned core (daemon off: this
# script owns the masters): `nginx` as configured by default, where an upgraded connection
# relays through proxy_buffer_size buffers of one page (4 KiB); `nginx-256k` with 256 KiB relay
# buffers, the size the proxy reads with (proxy_buffers and proxy_busy_buffers_size only so
# nginx accepts the larger proxy_buffer_size; responses that are not upgrades are not buffered
# anyway). Separate processes so each target's CPU is its own.
NGINX_ADDR="127.0.0.1:$("$WSLOAD" free-port)"
NGINX_BIG_ADDR="127.0.0.1:$("$WSLOAD" free-port)"
start_nginx() { # NAME ADDR EXTRA-DIRECTIVES; sets NGINX_STARTED_PID
  local dir="$TMP/$1"
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $dir/client_body;
  proxy_temp_path $dir/proxy;
  proxy_http_version 1.1;
  proxy_set_header Upgrade \$http_upgrade;
  proxy_set_header Connection "upgrade";
  proxy_buffering off;
  proxy_read_timeout 600s;
  proxy_send_timeout 600s;
  server {
    listen $2;
    $3
    location / { proxy_pass http://$ECHO_ADDR; }
  }
}
EOF
  "$NGINX" -q -t -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
    || die "nginx rejected its configuration ($1)"
  "${RELAY_CPU[@]}" "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
  NGINX_STARTED_PID=$!
  STARTED+=("$NGINX_STARTED_PID")
}
start_nginx nginx "$NGINX_ADDR" ""
NGINX_PID=$NGINX_STARTED_PID
start_nginx nginx-big "$NGINX_BIG_ADDR" "proxy_buffer_size 256k; proxy_buffers 4 256k; proxy_busy_buffers_size 512k;"
NGINX_BIG_PID=$NGINX_STARTED_PID

"$WSLOAD" wait-port "$PROXY_ADDR" || die "the proxy did not start"
[[ -z "${PROXY_B:-}" ]] || "$WSLOAD" wait-port "$PROXY_B_ADDR" || die "proxy-B did not start"
"$WSLOAD" wait-port "$NGINX_ADDR" || die "nginx did not start"
"$WSLOAD" wait-port "$NGINX_BIG_ADDR" || die "nginx did not start"

TOKEN="$(WALLCRAWLER_JWT_PRIVATE_KEY_FILE="$KEY_FILE" "$CTL" token --session-id "$SESSION")"
FRESH=()
[[ "$FRESH_TOKENS" == 1 ]] && FRESH=(--fresh-token-key "$KEY_FILE" --fresh-token-session "$SESSION")

# --- measure -----------------------------------------------------------------------------
mkdir -p "$OUT_DIR"
REV="unknown (not a git checkout)"
if git rev-parse --git-dir >/dev/null 2>&1; then
  REV="$(git rev-parse --short HEAD)"
  git diff --quiet HEAD -- src crates || REV="$REV (src or crates modified)"
fi
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
REPORT="$OUT_DIR/compare-$STAMP.txt"
{
  echo "# wallcrawler relay comparison, $STAMP"
  echo "# commit $REV"
  echo "# $(uname -sr), $(nproc) CPUs, $("$NGINX" -v 2>&1)"
  echo "# pinning: $pinned"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$REPORT"
log "measuring (throughput alone takes $(( ROUNDS * (4 + ${#PROXY_B_TARGET[@]} / 2) * (SECS + 1) )) s)"
timeout 900 "${LOAD_CPU[@]}" "$WSLOAD" compare \
  --target "direct=$ECHO_ADDR" \
  --target "proxy=$PROXY_ADDR@$PROXY_PID" "${PROXY_B_TARGET[@]}" \
  --target "nginx=$NGINX_ADDR@$NGINX_PID" \
  --target "nginx-256k=$NGINX_BIG_ADDR@$NGINX_BIG_PID" \
  --path "/devtools/page/bench?signingKey=$TOKEN" \
  --conns "$CONNS" --secs "$SECS" --rounds "$ROUNDS" \
  --rtt-samples "$RTT_SAMPLES" --setup-samples "$SETUP_SAMPLES" --idle-conns "$IDLE_CONNS" \
  "${FRESH[@]}" \
  --clk-tck "$(getconf CLK_TCK)" \
  --json "$OUT_DIR/compare-$STAMP.json" | tee -a "$REPORT"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$REPORT"
kill -0 "$PROXY_PID" 2>/dev/null || die "the proxy exited during the run"
kill -0 "$NGINX_PID" 2>/dev/null || die "nginx exited during the run"
kill -0 "$NGINX_BIG_PID" 2>/dev/null || die "nginx-256k exited during the run"
log "results: $REPORT and ${REPORT%.txt}.json"
