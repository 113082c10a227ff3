#!/usr/bin/env bash
# Runs CMD ARGS... with a private PostgreSQL server (tests/tools/pg-server.sh)
# and TESSERA_TEST_PG_URL, TESSERA_TEST_PG_SOCKET_URL, TESSERA_TEST_PG_RESTART
# exported; stops the server and removes its directory afterwards, whatever
# happens. Exits with CMD's status.
#
#   bash tests/tools/with-postgres.sh build/tests/kv_test --gtest_filter='*postgres*'
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: with-postgres.sh CMD [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/tessera-pg-XXXXXX")
rmdir "$dir"  # pg-server.sh creates it with the right owner
cleanup() { bash "$here/pg-server.sh" stop "$dir" || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
start=$(date +%s%N)
bash "$here/pg-server.sh" start "$dir" >/dev/null
echo "with-postgres.sh: server up in $(( ($(date +%s%N) - start) / 1000000 )) ms ($dir)" >&2
# shellcheck disable=SC1091
source "$dir/env"
status=0
"$@" || status=$?
exit "$status"
