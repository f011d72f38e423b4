#!/usr/bin/env bash
# Checks deploy/template.yaml without AWS: cfn-lint (errors fail; warnings are printed),
# checkov (every suppression is a `Metadata.checkov.skip` with a reason in the template; none on
# the command line), and deploy/check_template.py (what moto ignores and cfn-lint misses, and
# the template's environment and IAM against the code) with its failing cases
# (deploy/test_check_template.py), and the template's authority per session with IAM enforced
# in a private moto (deploy/test_stack_iam.py: a task's own role reaches no session data, a
# session's credentials reach their own archive alone). The platform itself runs on the stack
# in moto in the cargo test `stack_` (tests/pool/stack.rs).
#
# Needs scripts/install-test-deps.sh first (.venv with cfn-lint, .venv-checkov with checkov).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TEMPLATE=deploy/template.yaml
log() { printf '[check-infra] %s\n' "$*" >&2; }

t0=$SECONDS
log "cfn-lint $("$ROOT/.venv/bin/cfn-lint" --version 2>&1)"
.venv/bin/cfn-lint --non-zero-exit-code error "$TEMPLATE" >&2

log "checkov $("$ROOT/.venv-checkov/bin/checkov" --version 2>&1)"
# --skip-download: no policy download from outside (and none is needed for CloudFormation).
.venv-checkov/bin/checkov --skip-download --quiet --compact --framework cloudformation \
  -f "$TEMPLATE" >&2

log "template assertions"
.venv/bin/python deploy/check_template.py "$TEMPLATE"
# Their failing cases: the template widened one way at a time must fail them.
.venv/bin/python deploy/test_check_template.py >&2
log "the stack's IAM in moto"
.venv/bin/python deploy/test_stack_iam.py >&2
log "done in $((SECONDS - t0)) s"
