#!/usr/bin/env bash
# The README as a newcomer follows it: its two quick-start commands and its examples, as written.
#
#   1. `scripts/local.sh --port 0`: reads the `connectUrl:` it prints, runs the README's
#      connect.mjs block against it (Puppeteer, Playwright ws/http/header, chrome-remote-interface
#      and Stagehand each drive a page; its last line closes the browser), and expects
#      local.sh to end by itself with status 0.
#   2. `scripts/platform.sh --port 0 --data-dir <fresh>`: reads `baseURL:`, `apiKey:` and
#      `projectId:`, runs the README's api.sh, sdk.mjs, stagehand.mjs and extension-upload.sh
#      (a 5 MiB extension through the presigned upload) blocks with them, checks that the
#      managed policy platform.sh installs applies to its pages (as root: platform.sh runs in a
#      private mount namespace whose /etc/chromium/policies starts empty, so the block seen is
#      what platform.sh installed), then ends it with Ctrl-C (SIGINT) and expects status 0.
# Each block is taken from README.md by name (tests/py/readme_blocks.py), so a README that drifts
# from the code fails here. Prints how long each command took to print its first line.
# Run by scripts/test.sh after `cargo test` (which built what the scripts run). Exits non-zero on
# any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[readme] %s\n' "$*" >&2; }
fail() {
  log "FAILED: $*"
  exit 1
}

# Generous bounds against hangs (a fresh machine builds first); never a synchronisation.
START_BOUND=900
CLIENT_BOUND=180

work="$(mktemp -d)"
# The examples import the pinned clients, so they run from a directory inside tests/node.
examples="$(mktemp -d "$ROOT/tests/node/readme.XXXXXX")"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work" "$examples"
}
trap cleanup EXIT

block() { # name -> the README's block of that name, into $examples/name
  "$ROOT/.venv/bin/python" tests/py/readme_blocks.py README.md "$1" >"$examples/$1" \
    || fail "README.md has no block named $1"
}

# start NAME COMMAND...: runs COMMAND with stdout into a FIFO that the caller reads on fd
# ${NAME}_fd, stderr into $work/NAME.err; its pid is ${NAME}_pid.
start() {
  local name=$1
  shift
  mkfifo "$work/$name.out"
  "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pids+=("$!")
  printf -v "${name}_pid" '%s' "$!"
  local fd
  exec {fd}<"$work/$name.out"
  printf -v "${name}_fd" '%s' "$fd"
}

# value FD KEY: reads stdout lines until `KEY: value`, prints the value (blocks on the FIFO).
value() {
  local line
  while IFS= read -r -t "$START_BOUND" -u "$1" line; do
    if [[ $line == "$2: "* ]]; then
      printf '%s\n' "${line#"$2: "}"
      return 0
    fi
  done
  return 1
}

# show FILE: a file to the log, indented, with any token in it redacted (the examples print
# connectUrls: no token goes into a log).
show() { sed -E 's/(signingKey=)[^"&[:space:]]+/\1<redacted>/g; s/^/    /' "$1" >&2 || true; }

# run_example NAME COMMAND...: runs COMMAND (bounded) in the examples directory, its output to the log.
run_example() {
  local name=$1
  shift
  log "$name"
  if ! (cd "$examples" && timeout "$CLIENT_BOUND" "$@" >"$work/$name.log" 2>&1); then
    show "$work/$name.log"
    fail "$name"
  fi
  show "$work/$name.log"
}

# expect_lines NAME PATTERN...: each PATTERN matches a line of the example's output.
expect_lines() {
  local name=$1 pattern
  shift
  for pattern in "$@"; do
    grep -Eq "$pattern" "$work/$name.log" || fail "$name printed no line matching '$pattern'"
  done
}

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

show_err() { # NAME: the command's stderr, for a failure's context
  log "stderr of $1:"
  show "$work/$1.err"
}

for name in connect.mjs api.sh sdk.mjs stagehand.mjs extension-upload.sh; do block "$name"; done
command -v jq >/dev/null || fail "jq is missing (scripts/install-test-deps.sh installs it)"

# --- 1. scripts/local.sh ---------------------------------------------------------------------
log "scripts/local.sh --port 0"
t0=$EPOCHREALTIME
start local scripts/local.sh --port 0
# shellcheck disable=SC2154 # set by start
connect_url=$(value "$local_fd" connectUrl) || {
  show_err local
  fail "scripts/local.sh printed no connectUrl"
}
log "scripts/local.sh printed its connectUrl after $(elapsed "$t0") s"
[[ $connect_url == ws://127.0.0.1:*"/?signingKey="* ]] || fail "unexpected connectUrl shape"
live_url=$(value "$local_fd" liveViewUrl) || fail "scripts/local.sh printed no liveViewUrl"
[[ $live_url == http://127.0.0.1:*/viewer\?t=* ]] || fail "unexpected liveViewUrl shape"
# The viewer page answers its credential (and the page is the viewer's, not an error page).
# Read whole before matching: `curl | grep -q` under pipefail fails when grep stops reading at
# its match while curl is still writing (curl: (23) Failed writing body).
viewer_page=$(curl -fsS --max-time 10 "$live_url") || fail "the liveViewUrl answered no page"
grep -q '<canvas' <<<"$viewer_page" || fail "the liveViewUrl served no viewer page"

run_example connect.mjs node connect.mjs "$connect_url"
expect_lines connect.mjs '^puppeteer: hello$' '^playwright: hello$' \
  '^chrome-remote-interface: hello$' '^stagehand: hello$'
[[ $(grep -c '^puppeteer: hello$' "$work/connect.mjs.log") -eq 2 ]] || fail "puppeteer: want 2 pages"
[[ $(grep -c '^playwright: hello$' "$work/connect.mjs.log") -eq 3 ]] || fail "playwright: want 3 pages"

# The block's last line closed the browser: local.sh ends by itself, normally.
# shellcheck disable=SC2154 # set by start
if wait "$local_pid"; then
  log "scripts/local.sh ended with status 0 after the client's browser.close()"
else
  status=$?
  show_err local
  fail "scripts/local.sh ended with status $status"
fi

# --- 2. scripts/platform.sh ------------------------------------------------------------------
log "scripts/platform.sh --port 0 --data-dir <fresh>"
t0=$EPOCHREALTIME
platform=(scripts/platform.sh --port 0 --data-dir "$work/data")
if [[ $(id -u) -eq 0 ]]; then
  # shellcheck disable=SC2016 # expanded by the inner shell
  platform=(unshare --mount --propagation private bash -c \
    'mkdir -p /etc/chromium/policies && mount -t tmpfs -o mode=0755 policies /etc/chromium/policies && exec "$@"' \
    bash "${platform[@]}")
fi
start platform "${platform[@]}"
# shellcheck disable=SC2154 # set by start
BASE=$(value "$platform_fd" baseURL) || {
  show_err platform
  fail "scripts/platform.sh printed no baseURL"
}
log "scripts/platform.sh printed baseURL after $(elapsed "$t0") s"
KEY=$(value "$platform_fd" apiKey) || fail "scripts/platform.sh printed no apiKey"
PROJECT=$(value "$platform_fd" projectId) || fail "scripts/platform.sh printed no projectId"
export BASE KEY PROJECT

run_example api.sh bash -euo pipefail api.sh
expect_lines api.sh '"status": "RUNNING"' '"connectUrl": "ws://127\.0\.0\.1:' '"status": "COMPLETED"'

run_example sdk.mjs node sdk.mjs
expect_lines sdk.mjs '^sess_[0-9a-f-]+ hello$'

run_example stagehand.mjs env BROWSERBASE_BASE_URL="$BASE" node stagehand.mjs
expect_lines stagehand.mjs '^sess_[0-9a-f-]+ hello$'

# An extension over the one-request limit (4 MiB): 5 MiB of incompressible bytes, stored.
"$ROOT/.venv/bin/python" - "$examples/big-extension.zip" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_STORED) as z:
    z.writestr("manifest.json", '{"manifest_version":3,"name":"Big","version":"1"}')
    z.writestr("blob.bin", os.urandom(5 * 1024 * 1024))
PY
run_example extension-upload.sh bash -euo pipefail extension-upload.sh
expect_lines extension-upload.sh '"id": "ext_[0-9a-f]+"' '"fileName": "extup_[0-9a-f]+\.zip"'

# Chromium's managed policy applies on the platform: a page navigating to one of its blocked
# patterns (`*:9222`, Chrome's DevTools port: loopback, nothing needs to listen there) is
# refused by the policy (net::ERR_BLOCKED_BY_ADMINISTRATOR), not by a closed port.
if [[ $(id -u) -eq 0 ]]; then
  log "managed policy: a page on the platform navigates to http://127.0.0.1:9222/"
  sess=$(curl -sf -X POST "$BASE/v1/sessions" -H "x-wc-api-key: $KEY" \
    -H 'content-type: application/json' -d '{}') || fail "creating a session for the policy check"
  if ! (cd tests/node && timeout "$CLIENT_BOUND" node navigate.mjs --url "$(jq -r .connectUrl <<<"$sess")" \
    --targets "http://127.0.0.1:9222/") >"$work/policy.log" 2>&1; then
    show "$work/policy.log"
    fail "navigate.mjs on the platform"
  fi
  curl -sf -X POST "$BASE/v1/sessions/$(jq -r .id <<<"$sess")" -H "x-wc-api-key: $KEY" \
    -d '{"status":"REQUEST_RELEASE"}' >/dev/null || fail "releasing the policy check's session"
  grep -Fq '"http://127.0.0.1:9222/":"net::ERR_BLOCKED_BY_ADMINISTRATOR"' "$work/policy.log" || {
    show "$work/policy.log"
    fail "the managed policy does not apply on the platform"
  }
else
  log "not root: platform.sh cannot install the managed policy; its check is skipped"
fi

# Ctrl-C ends the platform, normally.
# shellcheck disable=SC2154 # set by start
kill -INT "$platform_pid"
if wait "$platform_pid"; then
  log "scripts/platform.sh ended with status 0 on Ctrl-C"
else
  status=$?
  show_err platform
  fail "scripts/platform.sh ended with status $status on SIGINT"
fi
pids=()
log "passed"
