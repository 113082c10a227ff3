#!/usr/bin/env bash
# Runs CMD with a private S3 server (tests/tools/s3-server.sh) on loopback:
#
#   tests/tools/with-s3.sh CMD ARGS...
#
# Starts the server in a fresh temporary directory, exports its
# TESSERA_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
# AWS_REGION (plus AWS_DEFAULT_REGION for older SDKs) and TESSERA_TEST_S3_DIR
# (the server's directory, with its logs), runs CMD, then stops the
# server and removes the directory, also on Ctrl-C, SIGTERM, or SIGKILL of
# this script (a detached watchdog cleans up then). Exits with CMD's status,
# or 1 if the server does not start. PORT picks the endpoint port (default: a
# free one). TMPDIR must support user xattrs (not tmpfs before Linux 6.6).
set -euo pipefail

(($# > 0)) || { echo "usage: $0 CMD ARGS..." >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/tessera-s3.XXXXXX")
watchdog=

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  [[ -z $watchdog ]] || kill "$watchdog" 2>/dev/null || true
  "$here/s3-server.sh" stop "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck disable=SC2016
setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
                "$2" stop "$3"; rm -rf "$3"' \
  s3-watchdog "$$" "$here/s3-server.sh" "$dir" </dev/null >/dev/null 2>&1 &
watchdog=$!

"$here/s3-server.sh" start "$dir"
# Credentials from the caller's environment must not leak into the requests.
unset AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE
# shellcheck source=/dev/null
source "$dir/env"
export AWS_DEFAULT_REGION=$AWS_REGION
# The server's directory: tests count requests in its proxy-server.log.
export TESSERA_TEST_S3_DIR=$dir

status=0
"$@" || status=$?
exit "$status"
