#!/usr/bin/env bash
# The metadata engines side by side, without FUSE: `tessera bench-meta` on
# SQLite (a local file), Redis and PostgreSQL (private servers started by
# tests/tools, on loopback), with 1 and 4 threads. Prints markdown tables.
# Usage: bench/bench_meta.sh [TESSERA] [COUNT]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TESSERA=$(realpath "${1:-$HERE/../build/src/tessera}")
COUNT=${2:-2000}
WORK=$(mktemp -d /tmp/tessera-bench-meta.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

run() {  # URL LABEL
  "$TESSERA" format "$1" benchmeta --bucket "$WORK/bucket" --force >/dev/null 2>&1
  for p in 1 4; do
    echo
    echo "#### $2, $p thread(s), $COUNT operations per thread and phase"
    echo
    "$TESSERA" bench-meta "$1" --count "$COUNT" -p "$p" 2>/dev/null
  done
}

echo "bench-meta, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
run "sqlite3://$WORK/meta.db" "SQLite (WAL, synchronous=NORMAL)"
export -f run
export TESSERA COUNT WORK
bash "$HERE/../tests/tools/with-redis.sh" bash -c 'run "$TESSERA_TEST_REDIS_URL" "Redis 7 (loopback TCP, appendfsync everysec)"'
bash "$HERE/../tests/tools/with-postgres.sh" bash -c 'run "$TESSERA_TEST_PG_URL" "PostgreSQL 15 (loopback TCP, synchronous_commit on)"' 2>/dev/null
