#!/usr/bin/env bash
# Runs every fuzz target (the `fuzz` test modules: wallcrawler_testkit::fuzz) for SECONDS each
# (default 8), printing each target's name, cases and seconds; exits non-zero if any target
# fails (its smallest failing input is printed, and PROPTEST_RNG_SEED=<seed> replays the run).
#
#   scripts/fuzz.sh            # every target, 8 s each (what CI runs, after the tests)
#   scripts/fuzz.sh 600        # a long run: 10 minutes each
#   scripts/fuzz.sh 60 guard   # only the targets whose name contains "guard"
#
# The targets run from the tests' debug build (the one scripts/lib.sh builds): after
# `cargo test` or scripts/test.sh nothing is compiled. A plain `cargo test` runs each target for a few cases.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

seconds="${1:-8}"
only="${2:-}"
if ! [[ "$seconds" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [NAME-FILTER]" >&2
  exit 64
fi

# Each target: the package, its test binary (lib: the unit tests; main: tests/main.rs) and
# the test's full name.
targets=(
  "wallcrawler-contract main fuzz::token_validate"
  "wallcrawler-contract main fuzz::viewer_validate"
  "wallcrawler-contract main fuzz::claim_parse"
  "wallcrawler-contract main fuzz::recording_page_and_index"
  "wallcrawler-local main fuzz::extension_archive"
  "wallcrawler-controller lib fuzz::cdp::guard"
  "wallcrawler-controller lib fuzz::cdp::guard_one_page"
  "wallcrawler-controller lib fuzz::cdp::inspector_messages"
  "wallcrawler-controller lib fuzz::cdp::inspector_bytes"
  "wallcrawler-controller lib fuzz::profile::profile_archive"
  "wallcrawler-controller lib fuzz::proxy_header::proxy_header_round_trip"
  "wallcrawler-controller lib fuzz::proxy_header::proxy_header_bytes"
  "wallcrawler-controller lib chrome::egress::fuzz::socks5_handshake"
  "wallcrawler-controller lib chrome::egress::fuzz::egress_policy"
  "wallcrawler-control-plane lib fuzz::metadata_query"
  "wallcrawler-control-plane lib fuzz::upload_name"
  "wallcrawler-control-plane lib fuzz::multipart_upload"
)

# The test binaries of the shared debug build, as "<package> <lib|main> <path>" lines.
binaries="$(cargo test --workspace --locked --lib --tests --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kind = "lib" if "lib" in t["kind"] else t["name"]
    # "path+file:///dir#name@version", or "path+file:///dir/name#version".
    where, _, frag = m["package_id"].partition("#")
    pkg = frag.split("@")[0] if "@" in frag else where.rstrip("/").split("/")[-1]
    print(pkg, kind, m["executable"])
')"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
failed=0
ran=0
total_start=$SECONDS
for t in "${targets[@]}"; do
  read -r pkg kind name <<<"$t"
  [[ -z "$only" || "$name" == *"$only"* ]] || continue
  bin="$(awk -v p="$pkg" -v k="$kind" '$1 == p && $2 == k { print $3 }' <<<"$binaries" | head -n 1)"
  if [[ -z "$bin" ]]; then
    echo "fuzz: no test binary for $pkg ($kind)" >&2
    exit 1
  fi
  start=$EPOCHREALTIME
  if FUZZ_SECONDS="$seconds" "$bin" --exact "$name" --nocapture >"$log" 2>&1; then
    verdict=passed
  else
    verdict=FAILED
    failed=$((failed + 1))
  fi
  ran=$((ran + 1))
  cases="$(sed -n 's/^fuzz [^:]*: \([0-9]* cases\) in .*/\1/p' "$log" | head -n 1)"
  printf 'fuzz %-60s %s in %.1f s (%s)\n' "$name" "$verdict" \
    "$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" "${cases:-no cases counted}"
  if [[ $verdict == FAILED ]]; then
    cat "$log"
  fi
done
echo "fuzz: $ran targets in $((SECONDS - total_start)) s, $failed failed"
[[ $failed -eq 0 && $ran -gt 0 ]]
