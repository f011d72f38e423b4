#!/usr/bin/env bash
# The house rules beside clippy's (Step 9):
#   - code outside tests: no function over 70 lines, none with more than 5 parameters — held by
#     scripts/test.sh's one clippy run (clippy.toml's thresholds, too_many_lines enabled in
#     Cargo.toml; test code allows both: a test reads top to bottom);
#   - and no function outside tests over 70 raw lines, blank and comment lines included
#     (clippy counts code lines only): scripts/fn-lengths.py --max 70, checked here (Step 21);
#   - no circle among the top-level modules of any crate: the controller, the control plane,
#     the contract, the local crate, the AWS pieces and the test kit (scripts/module-graph.py),
#     checked here;
#   - the controller's listeners (Step 21): `edge` (what every listener shares) names neither
#     `proxy` nor `gateway`, and `gateway` and `chrome` name no `proxy` module. The rule is
#     proved able to fail on every run: the same check on a copy of src/ with a planted
#     `use crate::proxy::…` in src/gateway/ must refuse it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CONTROLLER_RULES=(--forbid "edge:proxy,gateway" --forbid "gateway:proxy" --forbid "chrome:proxy")

for src in src crates/control-plane/src crates/contract/src crates/local/src crates/aws/src crates/testkit/src; do
  rules=()
  [[ "$src" == src ]] && rules=("${CONTROLLER_RULES[@]}")
  if ! graph="$(python3 scripts/module-graph.py "$src" "${rules[@]}")"; then
    printf '%s\n' "$graph" >&2
    exit 1
  fi
  printf '%s\n' "$graph" | tail -n 1 >&2
done

# The planted import: a copy of src/ whose gateway names the proxy must be refused, by name.
planted="$(mktemp -d)"
trap 'rm -rf "$planted"' EXIT
cp -r src "$planted/src"
printf '\nuse crate::proxy::guard::judge as _planted;\n' >> "$planted/src/gateway/lookup.rs"
if out="$(python3 scripts/module-graph.py "$planted/src" "${CONTROLLER_RULES[@]}")"; then
  echo "check-shape: a planted crate::proxy import in src/gateway/ was not refused" >&2
  exit 1
fi
grep -q '^FORBIDDEN: gateway -> proxy' <<<"$out" || {
  printf 'check-shape: the planted import was refused for another reason:\n%s\n' "$out" >&2
  exit 1
}
echo "the planted use crate::proxy in src/gateway/ is refused" >&2

if ! python3 scripts/fn-lengths.py --max 70; then
  echo "check-shape: split the functions above (scripts/fn-lengths.py ranks them)" >&2
  exit 1
fi
