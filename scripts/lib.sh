#!/usr/bin/env bash
# Sourced by the scripts that run the project's binaries (local.sh, platform.sh, image.sh,
# lambda-test.sh, test.sh): one build for all of them; and Chromium's managed policy for the
# scripts that run Chrome here (local.sh, platform.sh, install-test-deps.sh).
#
# The binaries are the debug build that `cargo test` makes: the same packages, the same feature
# set (the tests' dev-dependencies turn features on in shared crates such as tokio, so a plain
# `cargo build` would build most of the dependency tree a second time) and the same profile
# (Cargo.toml's [profile.dev]). So `scripts/local.sh` after `scripts/test.sh` or
# `scripts/platform.sh` compiles nothing, and the tests run exactly what a user runs.
# WALLCRAWLER_BUILD=release selects an optimised build instead (a separate, longer build; for
# benchmarks or a long-lived local platform).
#
# Callers set ROOT to the repository root first.

# The directory the binaries are in (cargo's target directory, then the profile).
wc_bin_dir() {
  local target="${CARGO_TARGET_DIR:-$ROOT/target}"
  if [[ "${WALLCRAWLER_BUILD:-debug}" == release ]]; then
    printf '%s/release\n' "$target"
  else
    printf '%s/debug\n' "$target"
  fi
}

# Builds the workspace's binaries (and, in the shared debug build, its tests); progress on stderr.
wc_build() {
  case "${WALLCRAWLER_BUILD:-debug}" in
    # `--tests` builds each package's binaries too (its integration tests run them); no
    # `--bins`, which would add an empty unit-test harness per binary.
    debug) cargo test --workspace --locked --lib --tests --no-run --quiet >&2 ;;
    release) cargo build --workspace --release --locked --bins --quiet >&2 ;;
    *)
      echo "WALLCRAWLER_BUILD must be debug or release, not '${WALLCRAWLER_BUILD}'" >&2
      return 64
      ;;
  esac
}

# Installs Chromium's managed policies (chrome/policies/managed/*.json: the URL blocklist with
# the metadata endpoints and the controller's own ports, the download directory…) into
# /etc/chromium/policies/managed, as the image does, so a Chrome started on this machine runs
# under the same policy as in production. Chromium reads managed policies only from there, so
# this needs root; otherwise a warning when the installed copy differs. $1: the caller's log tag.
wc_install_chrome_policy() {
  local tag=$1 dir=/etc/chromium/policies/managed
  if [[ $(id -u) -eq 0 ]]; then
    install -d -m 0755 "$dir"
    install -m 0644 "$ROOT"/chrome/policies/managed/*.json "$dir/"
    echo "[$tag] chromium policies: installed into $dir" >&2
  elif ! cmp -s "$ROOT/chrome/policies/managed/wallcrawler.json" "$dir/wallcrawler.json"; then
    echo "[$tag] warning: not root, so $dir does not hold chrome/policies/managed:" \
      "Chrome runs here without the platform's URL blocklist and download policy" \
      "(run as root once, or install those files there)" >&2
  fi
}
