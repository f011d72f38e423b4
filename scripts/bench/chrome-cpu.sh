#!/usr/bin/env bash
# What one Chrome start costs the machine, for each browser binary: started with the
# controller's flags (chrome/flags.conf, a fresh --user-data-dir, DevTools on 127.0.0.1 port 0,
# about:blank) as uid 65534 in a cgroup of its own, idle IDLE seconds after its
# DevToolsActivePort appears, then SIGTERM and wait until every process of it is gone. Prints,
# per start: ready (ms from the start to DevToolsActivePort), CPU to the end of the idle time
# and CPU in all (ms, the cgroup's cpuacct/cpu.stat: every Chrome process). Root (cgroup,
# setpriv). Run it in `unshare --net` (only lo) so the browser reaches nothing.
#
# Knobs (environment):
#   BROWSERS="/usr/lib/chromium/chromium /usr/lib/chromium/chromium-headless-shell"
#   RUNS=5       starts per browser, the browsers taking turns
#   IDLE=1       seconds idle after ready
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BROWSERS="${BROWSERS:-/usr/lib/chromium/chromium /usr/lib/chromium/chromium-headless-shell}"
RUNS="${RUNS:-5}"
IDLE="${IDLE:-1}"

[[ $EUID == 0 ]] || { echo "run as root (a cgroup, setpriv)" >&2; exit 1; }
read -r -a flags < <(grep -v -e '^\s*#' -e '^\s*$' -e '^--disable-features=' "$ROOT/chrome/flags.conf" | paste -sd' ')
features="$(sed -n 's/^--disable-features=//p' "$ROOT/chrome/flags.conf" | paste -sd,)"

work="$(mktemp -d)"
chmod 755 "$work"
cg=""
for root in /sys/fs/cgroup/cpuacct /sys/fs/cgroup; do
  if [[ -f "$root/cpuacct.usage" || -f "$root/cgroup.controllers" ]]; then
    cg="$root/wallcrawler-chrome-cpu-$$"
    mkdir "$cg"
    break
  fi
done
[[ -n "$cg" ]] || { echo "no cgroup v1 cpuacct or v2 hierarchy" >&2; exit 1; }
cleanup() {
  xargs -r kill -9 <"$cg/cgroup.procs" 2>/dev/null || true
  while [[ -s "$cg/cgroup.procs" ]]; do sleep 0.05; done
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# CPU nanoseconds of everything in the cgroup so far.
cpu_ns() {
  if [[ -f "$cg/cpuacct.usage" ]]; then
    cat "$cg/cpuacct.usage"
  else
    echo $(($(sed -n 's/^usage_usec //p' "$cg/cpu.stat") * 1000))
  fi
}

for run in $(seq "$RUNS"); do
  for bin in $BROWSERS; do
    profile="$work/profile-$run-$(basename "$bin")"
    mkdir "$profile"
    chown 65534:65534 "$profile"
    before="$(cpu_ns)"
    t0="$(date +%s%N)"
    # The child joins the cgroup before it becomes Chrome, so every process it starts is counted.
    bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$cg" \
      setpriv --reuid=65534 --regid=65534 --clear-groups env -i HOME="$work" PATH=/usr/bin:/bin \
      "$bin" --headless=new "${flags[@]}" "--disable-features=$features" \
      "--user-data-dir=$profile" --remote-debugging-address=127.0.0.1 --remote-debugging-port=0 \
      about:blank 2>/dev/null &
    pid=$!
    until [[ -s "$profile/DevToolsActivePort" ]]; do sleep 0.002; done
    t1="$(date +%s%N)"
    sleep "$IDLE"
    idle="$(cpu_ns)"
    kill -TERM "$pid"
    wait "$pid" || true
    while [[ -s "$cg/cgroup.procs" ]]; do sleep 0.01; done
    after="$(cpu_ns)"
    printf '%s run %d: ready %d ms, cpu to idle end %d ms, cpu in all %d ms\n' "$(basename "$bin")" "$run" \
      $(((t1 - t0) / 1000000)) $(((idle - before) / 1000000)) $(((after - before) / 1000000))
  done
done
