#!/usr/bin/env python3
"""Where a cgroup's CPU time goes, by kind of process: lifecycle.sh's CPU=detail.

Usage: cpu_by_process.py CGROUP_DIR OUT_JSON

Until SIGTERM, every 30 ms, reads the cgroup's processes and each one's utime + stime from
/proc/<pid>/stat, keeping the last value seen per process; then writes the sums by kind:
Chrome's processes by their --type (browser, renderer, gpu-process, zygote, utility:<service>),
the controller by its subcommand, the control plane, ffmpeg, anything else by its name. A
process's last 30 ms before it exits are missed, and the sampling costs CPU itself (outside the
cgroup, but on the same cores): use it to see the shares, and CPU=1 for the totals.
"""

import json
import os
import signal
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def kind(pid):
    try:
        with open(f"/proc/{pid}/cmdline", encoding="utf-8", errors="replace") as f:
            # Chrome rewrites its children's command lines with spaces, not NULs.
            words = f.read().replace("\0", " ").split()
    except OSError:
        return None
    if not words:
        return None
    exe = os.path.basename(words[0])
    chrome = exe.startswith("chrom") or (exe == "exe" and "--type=utility" in words)
    if chrome:
        t = "browser"
        for w in words:
            if w.startswith("--type="):
                t = w[len("--type="):]
            elif w.startswith("--utility-sub-type="):
                t = "utility:" + w.split("=", 1)[1].split(".")[-1]
        return "chrome " + t
    if exe == "wallcrawler-controller":
        return "controller " + (words[1] if len(words) > 1 else "")
    if exe == "wallcrawler-control-plane":
        return "control-plane"
    return exe


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 (utime, stime); the split starts at field 3.
    return (int(fields[11]) + int(fields[12])) / TICK


def main():
    cgroup, out = sys.argv[1], sys.argv[2]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    seen = {}
    while not stop:
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), encoding="ascii") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                cpu = cpu_seconds(pid)
            except (OSError, IndexError, ValueError):
                continue
            if pid not in seen:
                k = kind(pid)
                if k is None:
                    continue
                seen[pid] = [k, cpu]
            else:
                seen[pid][1] = cpu
        time.sleep(0.03)
    sums, counts = {}, {}
    for k, cpu in seen.values():
        sums[k] = sums.get(k, 0.0) + cpu
        counts[k] = counts.get(k, 0) + 1
    by_kind = {
        k: {"cpuSeconds": round(v, 2), "processes": counts[k]}
        for k, v in sorted(sums.items(), key=lambda kv: -kv[1])
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(by_kind, f)


if __name__ == "__main__":
    main()
