#!/usr/bin/env bash
# The house rules beside clippy's (Step 9):
#   - code outside tests: no function over 70 lines, none with more than 5 parameters — held by
#     scripts/test.sh's one clippy run (clippy.toml's thresholds, too_many_lines enabled in
#     Cargo.toml; test code allows both: a test reads top to bottom), not a second pass here;
#   - no circle among the top-level modules of any crate: the controller, the control plane,
#     the contract, the AWS pieces and the test kit (scripts/module-graph.py), checked here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

for src in src crates/control-plane/src crates/contract/src crates/aws/src crates/testkit/src; do
  if ! graph="$(python3 scripts/module-graph.py "$src")"; then
    printf '%s\n' "$graph" >&2
    exit 1
  fi
  printf '%s\n' "$graph" | tail -n 1 >&2
done
