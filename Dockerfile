# syntax=docker/dockerfile:1
#
# Wallcrawler controller image: one ECS Fargate task per browser session (and, with another
# entrypoint, the task API service: wallcrawler-control-plane task-api).
# Stage 1 builds the release binary; stage 2 is a slim Debian runtime with Chromium, fonts and an
# init (tini). The controller runs as root and Chrome as the unprivileged user 10001 (CHROME_USER),
# which cannot read the controller's files nor its /proc entries (environment, memory).

########## build ##########
FROM rust:1.95-bookworm AS builder
WORKDIR /src

# benches/ and tests/ are copied because Cargo.toml declares their targets (one integration-test
# binary, harness-free benches); node_modules are excluded by .dockerignore.
# rust-toolchain.toml is deliberately not copied: the image tag pins the toolchain, and the file's
# exact channel and components would make rustup download another toolchain during the build.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY benches ./benches
COPY tests ./tests
COPY chrome ./chrome
COPY src ./src

# The registry and target caches survive between builds (BuildKit); the binary is copied out of the
# cached target directory in the same step because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin wallcrawler-controller \
    && cargo build --release --locked -p wallcrawler-control-plane --bin wallcrawler-control-plane \
    && for bin in wallcrawler-controller wallcrawler-control-plane; do \
        install -D -m 0755 "target/release/$bin" "/out/$bin" && strip --strip-debug "/out/$bin"; \
    done

# The binary keeps its symbol table (function names in panics and backtraces in the task log) but
# not the debug line tables, most of the file. scripts/image.sh supplies this stage's /out from a
# binary built on the host instead (`podman build --build-context builder=DIR`), stripped the same
# way.

########## runtime ##########
FROM debian:bookworm-slim

# Versions are not pinned (DL3008): Debian's bookworm(-security) archive keeps only the current
# chromium build, so a pin would break every rebuild after the next security update; the
# debian:bookworm-slim base and the rebuild date fix what gets installed.
# curl is for the ECS container health check: `curl -fsS http://127.0.0.1:9223/health`.
# Two cheap cuts in what Chromium pulls in, neither used by headless Chrome, which renders with
# its own ANGLE and SwiftShader (/usr/lib/chromium/lib{EGL,GLESv2,vk_swiftshader}.so):
# - chromium-common depends on x11-utils (X11 desktop tools: xdpyinfo, xprop, …), which pulls
#   libgl1 → Mesa's DRI drivers → LLVM 15 and Z3, ~190 MB. An empty stand-in package satisfies
#   the dependency, so dpkg's state stays consistent and later `apt-get install`s still work.
# - the Vulkan validation layer (a debugging aid, 23 MB) is path-excluded like the docs are.
# webext-ublock-origin-chromium brings EasyList and EasyPrivacy, the lists of a session's
# blockAds (the egress hop's AD_BLOCK_LISTS default, src/chrome/egress/ads.rs): only those two
# files (3.4 MB) are kept, not the extension around them (16 MB, which Chrome never loads: the
# controller starts /usr/lib/chromium/chromium, not the wrapper that would load it).
# ffmpeg encodes the session's recording (src/recording/: screencast JPEGs → H.264 HLS
# segments, one niced process per page). Debian's build and its libraries (libavcodec,
# libavfilter, libx264, …) are the heaviest layer after Chromium: about 225 MB installed beyond
# what Chromium already brings, measured on the test VM from the dependency closure.
# hadolint ignore=DL3008
RUN mkdir -p /tmp/x11-utils/DEBIAN \
    && printf '%s\n' 'Package: x11-utils' 'Version: 99:0+wallcrawler' 'Architecture: all' \
        'Maintainer: Wallcrawler <wallcrawler@localhost>' 'Priority: optional' 'Section: x11' \
        'Description: empty stand-in for x11-utils' \
        ' Headless Chromium needs no X11 desktop tools; see the Dockerfile.' \
        >/tmp/x11-utils/DEBIAN/control \
    && dpkg-deb --root-owner-group --build /tmp/x11-utils /tmp/x11-utils.deb >/dev/null \
    && dpkg -i /tmp/x11-utils.deb \
    && rm -rf /tmp/x11-utils /tmp/x11-utils.deb \
    && printf '%s\n' 'path-exclude /usr/lib/chromium/libVkLayer_khronos_validation.so*' \
        'path-exclude /usr/share/chromium/extensions/ublock-origin/*' \
        'path-include /usr/share/chromium/extensions/ublock-origin/assets' \
        'path-include /usr/share/chromium/extensions/ublock-origin/assets/thirdparties' \
        'path-include /usr/share/chromium/extensions/ublock-origin/assets/thirdparties/easylist*' \
        >/etc/dpkg/dpkg.cfg.d/wallcrawler-chromium \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates \
        chromium \
        curl \
        ffmpeg \
        fonts-liberation \
        fonts-noto-color-emoji \
        tini \
        webext-ublock-origin-chromium \
    && rm -rf /var/lib/apt/lists/*

# Chrome's unprivileged user. The profile lives in a directory of root's (0711: Chrome's user
# enters it, cannot list or rename what is in it), so that the directories the controller writes
# beside the profile (<profile>-files) cannot be swapped for links by Chrome's user; the
# controller hands Chrome the profile and its own directories at each launch (src/chrome/user.rs).
RUN groupadd --gid 10001 wallcrawler \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/wallcrawler \
        --shell /usr/sbin/nologin wallcrawler \
    && install -d -o 10001 -g 10001 -m 0755 /home/wallcrawler/downloads \
    && install -d -o 0 -g 0 -m 0711 /var/lib/wallcrawler

COPY chrome/policies/managed/wallcrawler.json /etc/chromium/policies/managed/wallcrawler.json
COPY --chmod=0755 entrypoint.sh /usr/local/bin/entrypoint.sh
COPY --from=builder /out/wallcrawler-controller /usr/local/bin/wallcrawler-controller
# The task API service (gateway mode): the same image, entrypoint
# ["/usr/bin/tini", "--", "/usr/local/bin/wallcrawler-control-plane"], command ["task-api"].
COPY --from=builder /out/wallcrawler-control-plane /usr/local/bin/wallcrawler-control-plane

# Run Chromium's real binary, not Debian's /usr/bin/chromium wrapper, so the controller's flags are
# exactly the ones in chrome/flags.conf.
# CHROME_NETWORK=shared: on Fargate (awsvpc) the task has a network namespace of its own, so its
# loopback is already the browser's alone, and Fargate grants no CAP_SYS_ADMIN to make a private one.
ENV HOME=/home/wallcrawler \
    CHROME_PATH=/usr/lib/chromium/chromium \
    CHROME_USER=10001:10001 \
    CHROME_NETWORK=shared \
    USER_DATA_DIR=/var/lib/wallcrawler/profile

# Root, so that Chrome can run as another user than the controller: switching users takes
# CAP_SETUID and CAP_SETGID, and owning Chrome's files CAP_CHOWN and CAP_DAC_OVERRIDE, all in the
# default set a container's root keeps, on Fargate too (Fargate lets a task add no capability but
# SYS_PTRACE, and removes none of the defaults). A non-root controller with file capabilities
# would hold the same four, need them kept through the image's layers (xattrs) and still make the
# same calls; root in the container is no more than that plus the default set, inside the task's
# isolation. Chrome then runs as 10001 without any capability, and cannot read the controller's
# environment (the secret's ARN, the task role's credentials endpoint) nor its memory.
# hadolint ignore=DL3002
USER 0:0
WORKDIR /home/wallcrawler

# The authenticating CDP proxy. Chrome's own DevTools port (9222) listens on 127.0.0.1 only, and so
# do the Prometheus metrics (METRICS_ADDR defaults to 127.0.0.1:9224), so neither is exposed; set
# METRICS_ADDR=0.0.0.0:9224 and publish the port to scrape from outside the task.
EXPOSE 9223

# No HEALTHCHECK here: the ECS task definition defines it, as
#   ["CMD-SHELL", "curl -fsS http://127.0.0.1:9223/health || exit 1"]
# ECS sends SIGTERM on stop, then SIGKILL after stopTimeout; the controller's shutdown budget
# (SHUTDOWN_BUDGET_SECONDS, 25 s) must fit inside it. tini is PID 1 and reaps Chrome's orphans, so
# ECS's initProcessEnabled is not needed (harmless if set).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/entrypoint.sh"]
CMD ["run"]
