#!/usr/bin/env bash
# Sourced by scripts/local.sh and scripts/platform.sh: makes sure a Chrome/Chromium binary is
# available, installing Debian's chromium (as root, with apt) when none is.
ensure_chromium() {
  if [[ -n "${CHROME_PATH:-}" ]] || command -v chromium >/dev/null || command -v google-chrome >/dev/null \
    || [[ -x /usr/lib/chromium/chromium ]]; then
    return 0
  fi
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "Chromium is missing: install it (apt-get install chromium) or set CHROME_PATH" >&2
    return 1
  fi
  echo "[wallcrawler] installing Chromium (apt-get install chromium)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
}

# Sourced by scripts/platform.sh: ffmpeg for sessions' recordings (and their MP4s), installed
# from Debian (as root, with apt) when missing. Without it (not root, no apt) the platform
# still runs and says so: each page's recording fails to start, noted in the session's log.
ensure_ffmpeg() {
  if [[ -n "${FFMPEG_PATH:-}" ]] || command -v ffmpeg >/dev/null; then
    return 0
  fi
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "[wallcrawler] ffmpeg is missing: sessions are not recorded (apt-get install ffmpeg, or set FFMPEG_PATH)" >&2
    return 0
  fi
  echo "[wallcrawler] installing ffmpeg (apt-get install ffmpeg) for recordings" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >&2
}
