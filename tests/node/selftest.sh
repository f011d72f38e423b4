#!/usr/bin/env bash
# Runs every client script straight against a Chromium launched here (no
# proxy). Checks the scripts and node_modules, not the controller.
#   bash tests/node/selftest.sh        (after scripts/install-test-deps.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

dir=$(mktemp -d)
chrome_pid=
cleanup() {
  if [[ -n $chrome_pid ]] && kill -0 "$chrome_pid" 2>/dev/null; then kill "$chrome_pid"; wait "$chrome_pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

launch() {
  rm -f "$dir/profile/DevToolsActivePort"
  /usr/lib/chromium/chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --disable-background-networking --disable-component-update --disable-sync \
    --remote-debugging-address=127.0.0.1 --remote-debugging-port=0 --user-data-dir="$dir/profile" \
    >"$dir/chrome.log" 2>&1 &
  chrome_pid=$!
  for _ in $(seq 200); do [[ -s $dir/profile/DevToolsActivePort ]] && break; sleep 0.05; done
  port=$(head -1 "$dir/profile/DevToolsActivePort")
  ws="ws://127.0.0.1:$port$(sed -n 2p "$dir/profile/DevToolsActivePort")"
  http="http://127.0.0.1:$port"
}

pass=0 fail=0
check() { # name, expected exit code, command...
  local name=$1 want=$2 out rc
  shift 2
  set +e
  out=$("$@" 2>"$dir/stderr")
  rc=$?
  set -e
  if [[ $rc == "$want" ]] && tail -1 <<<"$out" | grep -q '^{"ok":'; then
    pass=$((pass + 1)); echo "ok   $name: $(tail -1 <<<"$out")"
  else
    fail=$((fail + 1)); echo "FAIL $name (rc=$rc): $out"; tail -5 "$dir/stderr"
  fi
}

launch
for c in puppeteer playwright cri ws stagehand; do
  check "drive $c ws" 0 node drive.mjs --client "$c" --url "$ws"
  [[ $c == cri ]] || check "drive $c ws+bearer" 0 node drive.mjs --client "$c" --url "$ws" --bearer test-token
done
for c in puppeteer playwright ws; do
  check "drive $c http+bearer" 0 node drive.mjs --client "$c" --url "$http" --bearer test-token
done
check "drive cri bearer refused" 1 node drive.mjs --client cri --url "$ws" --bearer x
check "two-clients" 0 node two-clients.mjs --url "$ws"
check "hold timeout" 1 node hold.mjs --url "$ws" --timeout-ms 1000
node hold.mjs --url "$ws" >"$dir/hold.out" 2>/dev/null &
hold_pid=$!
for _ in $(seq 100); do grep -q connected "$dir/hold.out" 2>/dev/null && break; sleep 0.05; done
check "close-browser" 0 node close-browser.mjs --url "$ws" --bearer x
set +e; wait "$hold_pid"; hold_rc=$?; set -e
check "hold sees close" 0 bash -c "cat '$dir/hold.out'; exit $hold_rc"
for _ in $(seq 100); do kill -0 "$chrome_pid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$chrome_pid" 2>/dev/null; then fail=$((fail + 1)); echo "FAIL chrome still running after close-browser"; fi
echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
