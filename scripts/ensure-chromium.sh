#!/usr/bin/env bash
# Sourced by scripts/local.sh and scripts/platform.sh: makes sure a Chrome/Chromium binary is
# available, installing Debian's chromium (as root, with apt) when none is; and, for
# platform.sh, ffmpeg for sessions' recordings.

# Installs the Debian package $1 (as root, with apt); says $2 and fails when it cannot.
wc_apt_install() {
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "$2" >&2
    return 1
  fi
  echo "[wallcrawler] installing $1 (apt-get install $1)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >&2
}

ensure_chromium() {
  if [[ -n "${CHROME_PATH:-}" ]] || command -v chromium >/dev/null || command -v google-chrome >/dev/null \
    || [[ -x /usr/lib/chromium/chromium ]]; then
    return 0
  fi
  wc_apt_install chromium "Chromium is missing: install it (apt-get install chromium) or set CHROME_PATH"
}

# ffmpeg for sessions' recordings (and their MP4s). Without it (not root, no apt) the platform
# still runs and says so: each page's recording fails to start, noted in the session's log.
ensure_ffmpeg() {
  if [[ -n "${FFMPEG_PATH:-}" ]] || command -v ffmpeg >/dev/null; then
    return 0
  fi
  wc_apt_install ffmpeg \
    "[wallcrawler] ffmpeg is missing: sessions are not recorded (apt-get install ffmpeg, or set FFMPEG_PATH)" \
    || true
}
