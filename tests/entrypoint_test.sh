#!/usr/bin/env bash
# Tests for entrypoint.sh, run without Docker: the controller is replaced by a fake (through
# WALLCRAWLER_CONTROLLER_BIN or the PATH) that records its PID and arguments and traps SIGTERM.
#
# Shows that the entrypoint creates the profile and downloads directories, passes arguments
# through verbatim, `exec`s the controller (same PID, so signals and the exit status are the
# controller's), and stops before the controller when it cannot prepare the directories.
#
# Usage: bash tests/entrypoint_test.sh      (prints "N passed, M failed"; exit 1 on any failure)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
entrypoint=$repo/entrypoint.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/entrypoint-test.XXXXXX")
started=()   # PIDs of entrypoints started in the background, killed on exit if still alive

# Kills whatever a failed case left running: the entrypoints, and the fake controllers and their
# blockers by the PIDs they recorded (they differ from the entrypoint's when exec is broken).
cleanup() {
    local pid f
    for f in "$work"/*/out/pid "$work"/*/out/blocker; do
        [[ -s $f ]] && started+=("$(<"$f")")
    done
    for pid in "${started[@]}"; do
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   - $1"; }
fail() { failed=$((failed + 1)); echo "FAIL - $1"; }
check() { # check DESCRIPTION COMMAND...
    local desc=$1
    shift
    if "$@"; then pass "$desc"; else fail "$desc"; fi
}

# Waits up to 10 s for a non-empty file (bounded poll; the event is the file appearing).
wait_for_file() {
    local path=$1 i
    for ((i = 0; i < 200; i++)); do
        [[ -s $path ]] && return 0
        sleep 0.05
    done
    return 1
}

# The fake controller. It writes its arguments (NUL-separated, so spaces, newlines and empty
# arguments survive) and then its PID (written last, via rename: the "ready" marker). On SIGTERM
# it writes a marker and exits 7, so the test can tell its exit status from a shell's default 143.
# Argument "fail" makes it exit 64 at once. It blocks in `wait` on a background sleep, which a
# trapped signal interrupts at once (a foreground sleep would delay the trap).
fakebin=$work/bin
mkdir -p "$fakebin"
cat >"$fakebin/wallcrawler-controller" <<'FAKE'
#!/bin/sh
out=${FAKE_OUT:?FAKE_OUT must be set}
mkdir -p "$out"
printf '%s\0' "$@" >"$out/args"
printf 'fake controller pid=%s args:' "$$"
printf ' [%s]' "$@"
printf '\n'
if [ "${1-}" = fail ]; then exit 64; fi
blocker=
trap 'echo TERM >"$out/term.tmp" && mv "$out/term.tmp" "$out/term"; [ -n "$blocker" ] && kill "$blocker" 2>/dev/null; exit 7' TERM
sleep 300 &
blocker=$!
echo "$blocker" >"$out/blocker"
echo "$$" >"$out/pid.tmp" && mv "$out/pid.tmp" "$out/pid"
wait "$blocker"
exit 0
FAKE
chmod +x "$fakebin/wallcrawler-controller"

read_args() { # read_args FILE -> fills the global array got_args
    got_args=()
    local a
    while IFS= read -r -d '' a; do got_args+=("$a"); done <"$1"
}

# --- 1. directories, verbatim arguments, exec (same PID), SIGTERM delivery, exit status ---------
case1=$work/case1
# shellcheck disable=SC2016 # '$HOME' is meant literally: the entrypoint must not expand it.
want_args=(run --session-id "sess with space" "" "two  spaces" '$HOME' '*' "line
break" "--flag=a b")
HOME=$case1/home \
    USER_DATA_DIR=$case1/data/nested/profile \
    WALLCRAWLER_CONTROLLER_BIN=$fakebin/wallcrawler-controller \
    FAKE_OUT=$case1/out \
    sh "$entrypoint" "${want_args[@]}" >"$work/case1.stdout" 2>"$work/case1.stderr" &
ep_pid=$!
started+=("$ep_pid")

if wait_for_file "$case1/out/pid"; then
    pass "fake controller started"
    check "profile directory created from USER_DATA_DIR" test -d "$case1/data/nested/profile"
    check "downloads directory created under HOME" test -d "$case1/home/downloads"
    check "no profile directory under HOME when USER_DATA_DIR is set" test ! -e "$case1/home/profile"

    read_args "$case1/out/args"
    if [[ ${#got_args[@]} -eq ${#want_args[@]} ]] && [[ "${got_args[*]}" == "${want_args[*]}" ]]; then
        same=1
        for i in "${!want_args[@]}"; do
            [[ ${got_args[$i]} == "${want_args[$i]}" ]] || same=0
        done
    else
        same=0
    fi
    check "arguments passed through verbatim (${#want_args[@]} args, spaces, empty, glob, newline)" test "$same" = 1

    fake_pid=$(<"$case1/out/pid")
    check "controller runs as the entrypoint's process (exec: pid $fake_pid = $ep_pid)" test "$fake_pid" = "$ep_pid"

    kill -TERM "$ep_pid"
    check "SIGTERM sent to the entrypoint's PID reaches the controller" wait_for_file "$case1/out/term"
    wait "$ep_pid"
    status=$?
    check "entrypoint's exit status is the controller's (7, got $status)" test "$status" = 7
else
    fail "fake controller started (stderr: $(<"$work/case1.stderr"))"
fi

# --- 2. defaults: controller found on the PATH, profile under HOME, exit status passed on -------
case2=$work/case2
HOME=$case2/home \
    PATH=$fakebin:$PATH \
    FAKE_OUT=$case2/out \
    env -u USER_DATA_DIR -u WALLCRAWLER_CONTROLLER_BIN sh "$entrypoint" fail "x y" \
    >"$work/case2.stdout" 2>"$work/case2.stderr"
status=$?
check "default controller is wallcrawler-controller on the PATH" test -s "$case2/out/args"
check "default profile directory is \$HOME/profile" test -d "$case2/home/profile"
check "downloads directory created with default settings" test -d "$case2/home/downloads"
check "controller's failure status passed on (64, got $status)" test "$status" = 64
check "fake controller's stdout is passed through" grep -qF 'args: [fail] [x y]' "$work/case2.stdout"

# --- 3. a directory that cannot be created stops the entrypoint before the controller ----------
case3=$work/case3
mkdir -p "$case3/home"
: >"$case3/not-a-dir"
HOME=$case3/home \
    USER_DATA_DIR=$case3/not-a-dir/profile \
    WALLCRAWLER_CONTROLLER_BIN=$fakebin/wallcrawler-controller \
    FAKE_OUT=$case3/out \
    sh "$entrypoint" fail >"$work/case3.stdout" 2>"$work/case3.stderr"  # "fail": never blocks
status=$?
check "unpreparable profile directory exits non-zero (got $status)" test "$status" -ne 0
check "controller not started when directories cannot be prepared" test ! -e "$case3/out"
check "the failure names the directory on stderr" grep -qF "$case3/not-a-dir/profile" "$work/case3.stderr"

# --- 4. the script itself is valid POSIX sh --------------------------------------------------
check "entrypoint.sh parses with sh -n" sh -n "$entrypoint"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
