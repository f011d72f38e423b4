#!/usr/bin/env bash
# Builds the controller image from the project's Dockerfile with podman (no daemon, no container
# registry) and smoke-tests it as ECS would run it (tests/py/image_smoke.py).
#
#   scripts/image.sh                  # CI: the debug binary `cargo test` built, stripped
#   scripts/image.sh --release        # a release binary built here first, no cached layers (for a
#                                     # real push)
#   scripts/image.sh --binary PATH    # this controller binary
#   scripts/image.sh --tag NAME       # image name (default localhost/wallcrawler-controller:test)
#   scripts/image.sh --no-smoke       # build only
#
# What it does, each step skipped when already done:
#   1. installs podman, runc and debootstrap from Debian (as root);
#   2. writes a containers.conf for these machines (runc, cgroupfs, nofile ≤ the hard limit) and
#      points CONTAINERS_CONF at it for every podman command below;
#   3. builds a debootstrap minbase bookworm trimmed like the official slim image and imports it as
#      docker.io/library/debian:bookworm-slim (no registry is reachable here to pull it from);
#   4. `podman build --pull=never --build-context builder=DIR`: DIR/out/wallcrawler-controller,
#      a binary built on this host, stands in for the Dockerfile's `builder` stage (a plain
#      `docker build .` still compiles it from source in that stage);
#   5. prints the image's size and build time, then runs the smoke test.
#
# A binary built on this host (Debian 12, glibc 2.36) fits the bookworm runtime image.
# Progress goes to stderr; exits non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[image] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

BASE_IMAGE=docker.io/library/debian:bookworm-slim
TAG=localhost/wallcrawler-controller:test
binary=""
release=0
smoke=1
while (($#)); do
  case "$1" in
    --release) release=1 ;;
    --binary)
      binary="${2:?--binary needs a path}"
      shift
      ;;
    --tag)
      TAG="${2:?--tag needs a name}"
      shift
      ;;
    --no-smoke) smoke=0 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- 1. podman & co -----------------------------------------------------------
PODMAN_PACKAGES=(podman buildah runc conmon netavark aardvark-dns containernetworking-plugins
  slirp4netns fuse-overlayfs uidmap iptables debootstrap binutils)
missing=()
for pkg in "${PODMAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  [[ $(id -u) -eq 0 ]] || die "need root to apt-get install ${missing[*]}"
  log "apt: installing ${missing[*]}"
  t0=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  log "apt: done in $((SECONDS - t0)) s"
fi

# --- 2. containers.conf --------------------------------------------------------
# These VMs have a hybrid cgroup v1/v2 layout (crun refuses it), no CAP_SYS_RESOURCE and a hard
# nofile limit of 20000 (podman's default ulimits ask for more): runc, cgroupfs, ulimits within it.
nofile_hard="$(ulimit -Hn)"
[[ "$nofile_hard" == unlimited ]] && nofile_hard=1048576
nofile=$((nofile_hard < 1048576 ? nofile_hard : 1048576))
export CONTAINERS_CONF="$work/containers.conf"
cat >"$CONTAINERS_CONF" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

# --- 3. the base image ----------------------------------------------------------
# The Debian mirrors apt already uses (main, updates, security), so nothing else is contacted.
mirror_of() { # $1 = suite; prints the mirror URL apt uses for <suite>/main
  apt-cache policy | awk -v s="$1/main" '$3 == s && $4 == "amd64" { print $2; exit }'
}

build_base() {
  local main updates security rootfs t0
  main="$(mirror_of bookworm)"
  updates="$(mirror_of bookworm-updates)"
  security="$(mirror_of bookworm-security)"
  [[ -n "$main" ]] || die "no bookworm mirror in apt's sources (apt-cache policy); run apt-get update"
  rootfs="$work/rootfs"
  log "base: debootstrap --variant=minbase bookworm"
  t0=$SECONDS
  debootstrap --variant=minbase bookworm "$rootfs" "$main" >"$work/debootstrap.log" 2>&1 \
    || {
      tail -20 "$work/debootstrap.log" >&2
      die "debootstrap failed"
    }

  # Trimmed as the official slim image is (debuerreotype's --slimify and its apt/dpkg settings):
  # no docs, man pages or locales now or in any later layer, and apt keeps no caches or lists.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  printf 'Acquire::GzipIndexes "true";\nAcquire::CompressionTypes::Order:: "gz";\n' \
    >"$rootfs/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' \
    >"$rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"
  rm -f "$rootfs/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: bookworm%s\nComponents: main\n' \
      "$main" "${updates:+ bookworm-updates}"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [[ -n "$security" ]]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$security"
      printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
  } >"$rootfs/etc/apt/sources.list.d/debian.sources"
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/{man,groff,info,lintian,linda}/*
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/ldconfig/*
  rm -rf "$rootfs"/var/log/{apt,dpkg.log,alternatives.log,bootstrap.log} "$rootfs"/tmp/* "$rootfs"/run/*
  : >"$rootfs/etc/machine-id"
  tar --numeric-owner --xattrs -C "$rootfs" -c . \
    | podman import --quiet --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  log "base: $BASE_IMAGE imported in $((SECONDS - t0)) s ($(image_size "$BASE_IMAGE"))"
}

image_size() { # human-readable size of image $1
  podman image inspect --format '{{.Size}}' "$1" | numfmt --to=si --suffix=B
}

if podman image exists "$BASE_IMAGE"; then
  log "base: $BASE_IMAGE present ($(image_size "$BASE_IMAGE"))"
else
  [[ $(id -u) -eq 0 ]] || die "need root for debootstrap (to build $BASE_IMAGE)"
  build_base
fi

# --- 4. the controller binary and the image ----------------------------------------
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
if ((release)); then
  log "binary: cargo build --release"
  t0=$SECONDS
  cargo build --release --locked --bin wallcrawler-controller >&2
  cargo build --release --locked -p wallcrawler-control-plane --bin wallcrawler-control-plane >&2
  log "binary: release build in $((SECONDS - t0)) s"
  binary="$(WALLCRAWLER_BUILD=release wc_bin_dir)/wallcrawler-controller"
elif [[ -z "$binary" ]]; then
  binary="$(WALLCRAWLER_BUILD=debug wc_bin_dir)/wallcrawler-controller"
  if [[ ! -x "$binary" ]]; then
    # The one debug build (scripts/lib.sh), so nothing is compiled twice.
    log "binary: $binary missing; building the tests' debug binaries"
    WALLCRAWLER_BUILD=debug wc_build
  fi
fi
[[ -x "$binary" ]] || die "no controller binary at $binary"
# The task API service's binary (gateway mode runs `wallcrawler-control-plane task-api` from
# this image), from the same build beside the controller.
control_plane="$(dirname "$binary")/wallcrawler-control-plane"
[[ -x "$control_plane" ]] || die "no control-plane binary at $control_plane"
# The image keeps the symbol table (function names in panics and backtraces in the task log) but
# not the debug line tables, which would be most of the file.
for bin in "$binary" "$control_plane"; do
  out="$work/builder/out/$(basename "$bin")"
  install -D -m 0755 "$bin" "$out"
  strip --strip-debug "$out"
  log "binary: $bin ($(stat -c %s "$bin" | numfmt --to=si --suffix=B)," \
    "$(stat -c %s "$out" | numfmt --to=si --suffix=B) stripped)"
done

log "build: podman build $TAG"
t0=$SECONDS
build_flags=()
# A binary for a real push gets fresh Debian packages (Chromium's security updates) too, not the
# layers cached by earlier builds.
((release)) && build_flags+=(--no-cache)
podman build --pull=never --build-context builder="$work/builder" --tag "$TAG" "${build_flags[@]}" \
  --file Dockerfile . >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  die "podman build failed"
}
build_seconds=$((SECONDS - t0))
# Earlier builds' layers that no tag uses any more (this build's cached layers stay).
podman image prune --force >/dev/null
log "build: $TAG built in $build_seconds s; size $(image_size "$TAG")"

# --- 5. smoke test ----------------------------------------------------------------------
if ((smoke)); then
  log "smoke: tests/py/image_smoke.py $TAG"
  t0=$SECONDS
  "$ROOT/.venv/bin/python" "$ROOT/tests/py/image_smoke.py" --image "$TAG" \
    --token-binary "$binary"
  # The task API service's command as the stack runs it (entrypoint and command), answering
  # its help: the binary is there and runs in the image.
  podman run --rm --network none \
    --entrypoint '["/usr/bin/tini", "--", "/usr/local/bin/wallcrawler-control-plane"]' \
    "$TAG" task-api --help >"$work/task-api-help.txt" ||
    die "the image's wallcrawler-control-plane task-api --help failed"
  grep -q "TASK_API_LISTEN" "$work/task-api-help.txt" ||
    die "the image's task-api --help does not name TASK_API_LISTEN"
  # The recording's encoder and its MP4 join (src/recording/, crates/local/src/mp4.rs):
  # Debian's ffmpeg runs in the image, with libx264 and the concatf protocol.
  for list in encoders protocols; do
    podman run --rm --network none \
      --entrypoint "[\"/usr/bin/ffmpeg\", \"-hide_banner\", \"-$list\"]" \
      "$TAG" >"$work/ffmpeg-$list.txt" 2>&1 || die "the image's ffmpeg does not run"
  done
  grep -q "libx264 " "$work/ffmpeg-encoders.txt" || die "the image's ffmpeg has no libx264"
  grep -qx "  concatf" "$work/ffmpeg-protocols.txt" ||
    die "the image's ffmpeg has no concatf protocol"
  log "smoke: passed in $((SECONDS - t0)) s"
fi
