#!/usr/bin/env bash
# The house rules scripts/test.sh checks beside clippy's defaults (Step 9):
#   - code outside tests: no function over 70 lines, none with more than 5 parameters
#     (clippy's too_many_lines and too_many_arguments with scripts/shape/clippy.toml);
#   - no circle among the top-level modules of the controller or the control plane
#     (scripts/module-graph.py).
# Test code is not held to the limits: a test reads top to bottom.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CLIPPY_CONF_DIR="$ROOT/scripts/shape" cargo clippy --workspace --lib --bins --locked -- \
  -D warnings -D clippy::too_many_lines -D clippy::too_many_arguments

for src in src crates/control-plane/src; do
  if ! graph="$(python3 scripts/module-graph.py "$src")"; then
    printf '%s\n' "$graph" >&2
    exit 1
  fi
  printf '%s\n' "$graph" | tail -n 1 >&2
done
