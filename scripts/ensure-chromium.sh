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
