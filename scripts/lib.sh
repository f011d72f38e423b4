#!/usr/bin/env bash
# Sourced by the scripts that run the project's binaries (local.sh, platform.sh, image.sh,
# lambda-test.sh, test.sh): one build for all of them.
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
