#!/usr/bin/env bash
# Runs every check and test of the project on this machine, installing what they need first
# (Chromium, the pinned Node clients, hadolint; see scripts/install-test-deps.sh).
#
#   scripts/test.sh            # everything
#   scripts/test.sh -- FILTER  # only cargo tests whose name contains FILTER (after the checks),
#                              # without the image and Lambda script tests
#
# Exits non-zero on the first failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '\n[test] %s\n' "$*" >&2; }

filter=()
if [[ "${1:-}" == "--" ]]; then
  shift
  filter=("$@")
fi

# The debug profile (line tables only, no incremental state) is Cargo.toml's [profile.dev], so the
# build below is the one scripts/local.sh and scripts/platform.sh run (scripts/lib.sh).
export CARGO_TERM_COLOR=never

log "installing test dependencies"
bash scripts/install-test-deps.sh

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "shape: no module circle, no function over 70 raw lines (scripts/check-shape.sh; parameters and code lines: the clippy run above)"
bash scripts/check-shape.sh

log "Dockerfile and shell lint"
bash scripts/lint-docker.sh

log "entrypoint.sh test"
bash tests/entrypoint_test.sh

log "infrastructure template checks"
bash scripts/check-infra.sh

log "cargo test"
# Unit and integration tests of every crate (no doc-tests: the crates have no doc examples),
# the same build as scripts/lib.sh (its binaries are built for the integration tests).
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
set +e
cargo test --workspace --locked --lib --tests -- "${filter[@]}" 2>&1 | tee "$results"
status=${PIPESTATUS[0]}
set -e
passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^passed;?$/) s += $(i-1) } END { print s + 0 }' "$results")
failed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^failed;?$/) s += $(i-1) } END { print s + 0 }' "$results")

# Script tests, each counted as one test; skipped when a filter is given or a cargo test failed.
# They reuse what `cargo test` built (target/debug).
script_test() { # $1 = name, rest = command
  local name=$1
  shift
  log "$name"
  local t0=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    log "$name: passed in $((SECONDS - t0)) s"
  else
    failed=$((failed + 1))
    status=1
    log "$name: FAILED after $((SECONDS - t0)) s"
  fi
}
if [[ $status -eq 0 && ${#filter[@]} -eq 0 ]]; then
  # Each fuzz target (a parser of hostile input) for 8 s, about two minutes together, after the
  # few cases each had in `cargo test`; `scripts/fuzz.sh 600` for long runs.
  script_test "fuzz: every fuzz target for 8 s (scripts/fuzz.sh)" bash scripts/fuzz.sh 8
  script_test "readme: the quick start's two commands and the README's examples as written (tests/readme_test.sh)" \
    bash tests/readme_test.sh
  script_test "image: podman build and smoke test (scripts/image.sh)" bash scripts/image.sh
  script_test "lambda: packaged functions through the Runtime Interface Emulator (scripts/lambda-test.sh)" \
    bash scripts/lambda-test.sh
fi

echo
echo "Summary: $passed passed, $failed failed"
exit "$status"
