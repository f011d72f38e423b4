#!/usr/bin/env bash
# Packages the five control-plane Lambda functions as Lambda's provided.al2023 runtime expects:
# one zip per function holding the executable `bootstrap`, built with cargo-lambda (installed into
# .venv by scripts/install-test-deps.sh), which links with Zig against an older glibc than this
# machine's, so the binaries start on Amazon Linux 2023 (glibc 2.34).
#
#   scripts/lambda.sh              # release build (what to deploy)
#   scripts/lambda.sh --debug      # debug build (CI: the RIE test only needs binaries that start)
#   scripts/lambda.sh --arm64      # for arm64 (Graviton) functions; x86_64 otherwise
#   scripts/lambda.sh --out DIR    # where the zips go (default dist/lambda, gitignored)
#
# Writes DIR/wallcrawler-{api,authorizer,task-events,sweeper,session-events}-lambda.zip and prints their paths on stdout;
# progress on stderr. Artifacts of the build itself stay in the cargo target directory
# (`<target>/<triple>/{debug,release}`, apart from the host build).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[lambda] %s\n' "$*" >&2; }

FUNCTIONS=(wallcrawler-api-lambda wallcrawler-authorizer-lambda wallcrawler-task-events-lambda wallcrawler-sweeper-lambda wallcrawler-session-events-lambda)
profile=(--release)
arch=(--x86-64)
out="$ROOT/dist/lambda"
while (($#)); do
  case "$1" in
    --debug) profile=() ;;
    --arm64) arch=(--arm64) ;;
    --out)
      out="${2:?--out needs a directory}"
      shift
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      log "unknown argument: $1 (see --help)"
      exit 64
      ;;
  esac
  shift
done

cargo_lambda="$ROOT/.venv/bin/cargo-lambda"
if [[ ! -x "$cargo_lambda" ]]; then
  log "cargo-lambda missing: running scripts/install-test-deps.sh"
  bash scripts/install-test-deps.sh
fi
# cargo-lambda finds Zig through python-zig, beside it in the venv.
export PATH="$ROOT/.venv/bin:$PATH"

bins=()
for f in "${FUNCTIONS[@]}"; do bins+=(--bin "$f"); done
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
log "cargo lambda build ${profile[*]} ${arch[*]} (${FUNCTIONS[*]})"
t0=$SECONDS
"$cargo_lambda" lambda build "${profile[@]}" "${arch[@]}" --locked --package wallcrawler-control-plane \
  "${bins[@]}" --output-format binary --lambda-dir "$staging" >&2
log "built in $((SECONDS - t0)) s"

mkdir -p "$out"
out="$(cd "$out" && pwd)"
for f in "${FUNCTIONS[@]}"; do
  bootstrap="$staging/$f/bootstrap"
  [[ -x "$bootstrap" ]] || {
    log "error: cargo-lambda wrote no $bootstrap"
    exit 1
  }
  # As in the controller image: the symbol table stays (function names in panics), the debug
  # line tables (most of the file) go, so the function loads faster on a cold start.
  strip --strip-debug "$bootstrap"
  # Exactly one entry, `bootstrap`, executable: what the provided.al2023 runtime runs.
  rm -f "$out/$f.zip"
  (cd "$staging/$f" && zip -q -X "$out/$f.zip" bootstrap)
  log "$out/$f.zip ($(stat -c %s "$out/$f.zip" | numfmt --to=si --suffix=B); bootstrap" \
    "$(stat -c %s "$bootstrap" | numfmt --to=si --suffix=B))"
  echo "$out/$f.zip"
done
