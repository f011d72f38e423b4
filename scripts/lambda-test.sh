#!/usr/bin/env bash
# Packages the Lambda functions with scripts/lambda.sh into a temporary directory and invokes each
# through the AWS Lambda Runtime Interface Emulator against moto (tests/py/lambda_rie.py).
#
#   scripts/lambda-test.sh            # debug build (CI: a cold release build of the functions
#                                     # costs minutes more, and the test needs binaries that
#                                     # start as Lambda starts them, not fast ones)
#   scripts/lambda-test.sh --release  # the release packages, as deployed
#
# Uses the host's debug wallcrawler-control-plane (built by `cargo test`) for its `admin`
# commands. Exits non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

profile=(--debug)
if [[ "${1:-}" == "--release" ]]; then
  profile=()
elif [[ -n "${1:-}" ]]; then
  echo "usage: scripts/lambda-test.sh [--release]" >&2
  exit 64
fi

# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
admin="$(WALLCRAWLER_BUILD=debug wc_bin_dir)/wallcrawler-control-plane"
if [[ ! -x "$admin" ]]; then
  # The one debug build (scripts/lib.sh), so nothing is compiled twice.
  WALLCRAWLER_BUILD=debug wc_build
fi

dist="$(mktemp -d)"
trap 'rm -rf "$dist"' EXIT
bash scripts/lambda.sh "${profile[@]}" --out "$dist" >/dev/null
"$ROOT/.venv/bin/python" tests/py/lambda_rie.py --dist "$dist" --admin-binary "$admin"
