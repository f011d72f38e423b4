#!/bin/sh
# Container entrypoint for wallcrawler-controller.
#
# Runs under tini (see Dockerfile). It only prepares the directories Chrome uses, then `exec`s the
# controller so the controller *becomes* this process: tini forwards ECS's SIGTERM straight to it,
# and the controller's exit status is the container's. No shell stays in between.
#
# In the image it runs as root and the controller launches Chrome as CHROME_USER (10001), handing
# it the profile directory created here (root's until then).
#
# Environment:
#   USER_DATA_DIR                Chrome profile directory (default: $HOME/profile)
#   HOME                         downloads go to $HOME/downloads (the DownloadDirectory policy)
#   WALLCRAWLER_CONTROLLER_BIN   controller to exec (default: wallcrawler-controller on the PATH;
#                                tests point it at a fake)
set -eu

# ECS always sets HOME from the image user; fall back for `docker run --user <uid without passwd entry>`.
: "${HOME:=/home/wallcrawler}"
export HOME

profile_dir=${USER_DATA_DIR:-$HOME/profile}
downloads_dir=$HOME/downloads

if ! mkdir -p -- "$profile_dir" "$downloads_dir"; then
    echo "entrypoint: cannot create $profile_dir or $downloads_dir (running as uid $(id -u))" >&2
    exit 1
fi

exec "${WALLCRAWLER_CONTROLLER_BIN:-wallcrawler-controller}" "$@"
