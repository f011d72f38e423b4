#!/usr/bin/env bash
# The connect gateway's hop against nginx as a TLS-terminating WebSocket proxy, in one run,
# in front of one upstream: a raw WebSocket echo server (examples/wsload.rs echo-server)
# reached
#   - directly over plain TCP (the baseline),
#   - through `wallcrawler-controller gateway` over TLS (release build; the token checked and
#     the session looked up in a SESSIONS_DIR holding one READY session whose privateIP and
#     proxyPort are the echo upstream's; GATEWAY_PROXY_PROTOCOL=false, the echo speaks HTTP),
#   - through nginx over TLS (worker_processes 1; once with its default 4 KiB relay buffer,
#     once with 64 KiB ones, the size the gateway's TLS relay copies with),
# all serving the same certificate (the gateway's GATEWAY_LOCAL_CA_DIR makes it), measured by
# `wsload compare`: 1 MiB echo throughput and the relay's CPU per message, 256 B round-trip
# latency and CPU, connection setup with a full TLS handshake, RSS with idle wss connections.
#
# Prints a table and writes it, with JSON, to bench-results/ (gitignored). Everything listens
# on 127.0.0.1, every loop is bounded, and every process started here is stopped on exit.
#
# Knobs (environment):
#   PIN=auto|1|0        pin the relays (gateway, nginx) to CPU 1 and the load generator and
#                       echo upstream to CPU 0; auto = when there are at least 2 CPUs
#   SECS=5 ROUNDS=3     throughput seconds per target per round, and rounds
#   CONNS=4             connections streaming 1 MiB messages at once
#   RTT_SAMPLES=20000 SETUP_SAMPLES=2000
#   IDLE_CONNS=9900     idle connections held through each relay; a relay holds two sockets per
#                       connection, so the open-file limit (hard limit 20000 on our VMs) caps it
#                       just under 10,000
#   IDLE_WARM_BYTES=131072  then as many idle connections again, each having echoed one message
#                       of this size first (0 skips it): what a relay keeps per connection once
#                       it has carried a large message (a screenshot, say)
#   BUILD=1             cargo build --release first (0 to reuse the release build)
#   GATEWAY_B=PATH      also measure this wallcrawler-controller binary (target "gateway-B",
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
IDLE_CONNS="${IDLE_CONNS:-9900}"
IDLE_WARM_BYTES="${IDLE_WARM_BYTES:-131072}"
BUILD="${BUILD:-1}"
OUT_DIR="${OUT_DIR:-$ROOT/bench-results}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
SESSION="sess_bench-0000-0000-0000-000000000001"

log() { printf '[gateway-bench] %s\n' "$*" >&2; }
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

# Every process started here inherits this limit; a relay holds 2 sockets per connection.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) > 2 * IDLE_CONNS + 50 )) \
  || die "open-file limit $(ulimit -n) is too low for IDLE_CONNS=$IDLE_CONNS (a relay needs 2 per connection)"

TMP="$(mktemp -d -t wallcrawler-gwbench.XXXXXX)"
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
    for f in "$TMP"/gateway.log "$TMP"/gateway-b.log "$TMP"/nginx/error.log "$TMP"/nginx-64k/error.log; do
      [[ -s "$f" ]] && { log "--- $f"; tail -n 20 "$f" >&2; }
    done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- echo upstream -----------------------------------------------------------------------
"${LOAD_CPU[@]}" "$WSLOAD" echo-server --listen 127.0.0.1:0 --port-file "$TMP/echo.port" --exit-after-secs 1800 &
STARTED+=($!)
for _ in $(seq 100); do [[ -s "$TMP/echo.port" ]] && break; sleep 0.05; done
[[ -s "$TMP/echo.port" ]] || die "echo upstream did not start"
ECHO_PORT="$(cat "$TMP/echo.port")"
ECHO_ADDR="127.0.0.1:$ECHO_PORT"

# --- the session the gateway routes to ---------------------------------------------------
# One READY session document (the local platform's table, SESSIONS_DIR) naming the echo
# upstream as the task's proxy.
mkdir -p "$TMP/sessions"
cat >"$TMP/sessions/$SESSION.json" <<EOF
{
  "sessionId": "$SESSION",
  "status": "RUNNING",
  "internalStatus": "READY",
  "projectId": "proj_bench",
  "createdAt": "$(date -u +%Y-%m-%dT%H:%M:%S.000Z)",
  "expiresAt": $(( $(date +%s) + 7200 )),
  "privateIP": "127.0.0.1",
  "proxyPort": $ECHO_PORT
}
EOF

# --- the gateway (and its certificate, which nginx serves too) ---------------------------
start_gateway() { # BINARY NAME TLS-ENV...; sets GW_PID and GW_ADDR
  local addr
  addr="127.0.0.1:$("$WSLOAD" free-port)"
  SESSIONS_DIR="$TMP/sessions" WALLCRAWLER_JWT_PUBLIC_KEY="$PUBLIC_KEY" GATEWAY_LISTEN="$addr" \
    GATEWAY_PROXY_PROTOCOL=false MAX_CONNECTIONS=20000 METRICS_ADDR="" LOG_FORMAT=text RUST_LOG=warn \
    env "${@:3}" "${RELAY_CPU[@]}" "$1" gateway >"$TMP/$2.out" 2>"$TMP/$2.log" &
  GW_PID=$!
  STARTED+=("$GW_PID")
  GW_ADDR="$addr"
}
start_gateway "$CTL" gateway "GATEWAY_LOCAL_CA_DIR=$TMP/tls"
GATEWAY_PID=$GW_PID
GATEWAY_ADDR=$GW_ADDR
for _ in $(seq 200); do grep -q '^caCert: ' "$TMP/gateway.out" 2>/dev/null && break; sleep 0.05; done
grep -q '^caCert: ' "$TMP/gateway.out" || die "the gateway did not make its certificate"
CA="$TMP/tls/ca.pem"
CERT="$TMP/tls/cert.pem"
CERT_KEY="$TMP/tls/key.pem"
[[ -s "$CA" && -s "$CERT" && -s "$CERT_KEY" ]] || die "missing certificate files in $TMP/tls"

GATEWAY_B_TARGET=()
if [[ -n "${GATEWAY_B:-}" ]]; then
  [[ -x "$GATEWAY_B" ]] || die "GATEWAY_B=$GATEWAY_B is not an executable"
  # The same pair, as files (how a deployment gives the gateway its certificate).
  start_gateway "$GATEWAY_B" gateway-b "GATEWAY_TLS_CERT=$CERT" "GATEWAY_TLS_KEY=$CERT_KEY"
  GATEWAY_B_TARGET=(--target "gateway-B=wss://$GW_ADDR@$GW_PID")
  GATEWAY_B_ADDR=$GW_ADDR
fi

# --- nginx -------------------------------------------------------------------------------
# Two nginx processes, each one worker like the gateway's one pinned core (daemon off: this
# script owns the masters), ending TLS with the gateway's certificate and key: `nginx` as
# configured by default, where an upgraded connection relays through proxy_buffer_size buffers
# of one page (4 KiB); `nginx-64k` with 64 KiB relay buffers, the size of the gateway's TLS
# relay (proxy_buffers and proxy_busy_buffers_size only so nginx accepts the larger
# proxy_buffer_size). Session caches and tickets stay at their defaults: the client resumes
# nothing, so every setup is a full handshake either way.
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
worker_rlimit_nofile $(ulimit -n);
events { worker_connections $(ulimit -n); }
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
    listen $2 ssl;
    ssl_certificate $CERT;
    ssl_certificate_key $CERT_KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
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
start_nginx nginx-64k "$NGINX_BIG_ADDR" "proxy_buffer_size 64k; proxy_buffers 4 64k; proxy_busy_buffers_size 128k;"
NGINX_BIG_PID=$NGINX_STARTED_PID

"$WSLOAD" wait-port "$GATEWAY_ADDR" || die "the gateway did not start"
[[ -z "${GATEWAY_B:-}" ]] || "$WSLOAD" wait-port "$GATEWAY_B_ADDR" || die "gateway-B did not start"
"$WSLOAD" wait-port "$NGINX_ADDR" || die "nginx did not start"
"$WSLOAD" wait-port "$NGINX_BIG_ADDR" || die "nginx-64k did not start"

TOKEN="$(WALLCRAWLER_JWT_PRIVATE_KEY_FILE="$KEY_FILE" "$CTL" token --session-id "$SESSION" --ttl 7200)"

# --- measure -----------------------------------------------------------------------------
mkdir -p "$OUT_DIR"
REV="unknown (not a git checkout)"
if git rev-parse --git-dir >/dev/null 2>&1; then
  REV="$(git rev-parse --short HEAD)"
  git diff --quiet HEAD -- src crates || REV="$REV (src or crates modified)"
fi
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
REPORT="$OUT_DIR/gateway-$STAMP.txt"
{
  echo "# wallcrawler connect gateway vs nginx (TLS), $STAMP"
  echo "# commit $REV"
  echo "# $(uname -sr), $(nproc) CPUs, $("$NGINX" -v 2>&1), open-file limit $(ulimit -n)"
  echo "# pinning: $pinned"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$REPORT"
timeout 1500 "${LOAD_CPU[@]}" "$WSLOAD" compare \
  --target "direct=$ECHO_ADDR" \
  --target "gateway=wss://$GATEWAY_ADDR@$GATEWAY_PID" "${GATEWAY_B_TARGET[@]}" \
  --target "nginx=wss://$NGINX_ADDR@$NGINX_PID" \
  --target "nginx-64k=wss://$NGINX_BIG_ADDR@$NGINX_BIG_PID" \
  --ca-cert "$CA" \
  --path "/?signingKey=$TOKEN" \
  --conns "$CONNS" --secs "$SECS" --rounds "$ROUNDS" \
  --rtt-samples "$RTT_SAMPLES" --setup-samples "$SETUP_SAMPLES" --idle-conns "$IDLE_CONNS" \
  --idle-warm-bytes "$IDLE_WARM_BYTES" --clk-tck "$(getconf CLK_TCK)" \
  --json "$OUT_DIR/gateway-$STAMP.json" | tee -a "$REPORT"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$REPORT"
kill -0 "$GATEWAY_PID" 2>/dev/null || die "the gateway exited during the run"
kill -0 "$NGINX_PID" 2>/dev/null || die "nginx exited during the run"
kill -0 "$NGINX_BIG_PID" 2>/dev/null || die "nginx-64k exited during the run"
log "results: $REPORT and ${REPORT%.txt}.json"
