#!/usr/bin/env bash
# Runs every check and test of the project on this machine, installing what they need first
# (Chromium, the pinned Node clients, hadolint; see scripts/install-test-deps.sh).
#
#   scripts/test.sh            # everything
#   scripts/test.sh -- FILTER  # only cargo tests whose name contains FILTER (after the checks)
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

# Smaller, faster debug builds: no incremental state, line tables only.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
export CARGO_PROFILE_TEST_DEBUG=line-tables-only
export CARGO_TERM_COLOR=never

log "installing test dependencies"
bash scripts/install-test-deps.sh

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "Dockerfile and shell lint"
bash scripts/lint-docker.sh

log "entrypoint.sh test"
bash tests/entrypoint_test.sh

log "cargo test"
cargo test --workspace --locked -- "${filter[@]}"
