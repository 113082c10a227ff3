#!/usr/bin/env bash
# Runs CMD ARGS... with a private redis-server (tests/tools/redis-server.sh)
# and its TESSERA_TEST_REDIS_* variables exported; stops the server and
# removes its directory afterwards. Exits with CMD's status.
#
#   bash tests/tools/with-redis.sh build/tests/meta_test --gtest_filter='*redis*'
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: with-redis.sh CMD [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/tessera-redis-XXXXXX")
cleanup() { bash "$here/redis-server.sh" stop "$dir" || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
bash "$here/redis-server.sh" start "$dir"
# shellcheck disable=SC1091
source "$dir/env"
status=0
"$@" || status=$?
exit "$status"
