#!/usr/bin/env bash
# bench/dump_load.sh — rate (inodes/s) and peak RSS of `tessera load` and
# `tessera dump` on SQLite, Redis and PostgreSQL, for synthetic volumes of
# 100,000 and 1,000,000 inodes (bench/gen_dump.py: 1,000 files of one slice
# per directory). Servers are private instances (tests/tools/with-*.sh).
#
# usage: bench/dump_load.sh [--sizes "100000 1000000"] [--engines "sqlite redis postgres"] [TESSERA]
# Prints a markdown table on stdout.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
SIZES="100000 1000000"
ENGINES="sqlite redis postgres"
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) break ;;
  esac
done
T=$(realpath "${1:-$REPO/build/src/tessera}")

if [ -z "${TESSERA_TEST_REDIS_URL:-}" ] || [ -z "${TESSERA_TEST_PG_URL:-}" ]; then
  exec bash "$REPO/tests/tools/with-redis.sh" bash "$REPO/tests/tools/with-postgres.sh" \
    bash "$0" --sizes "$SIZES" --engines "$ENGINES" "$T"
fi
WORK=$(mktemp -d /tmp/tessera-dumpbench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Runs CMD, prints "seconds peak-RSS-KiB".
measure() {
  /usr/bin/time -f '%e %M' -o "$WORK/time" "$@" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  cat "$WORK/time"
}
flush_redis() { redis-cli -u "$TESSERA_TEST_REDIS_URL" FLUSHDB >/dev/null; }
drop_pg() { psql "$TESSERA_TEST_PG_URL" -qc 'DROP TABLE IF EXISTS kv' >/dev/null; }

echo "| inodes | engine | load inodes/s | load peak RSS | dump inodes/s | dump peak RSS | dump size |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for n in $SIZES; do
  python3 "$BENCH/gen_dump.py" "$n" >"$WORK/in.json"
  inodes=$(tail -1 "$WORK/in.json" | sed -E 's/.*"inodes":([0-9]+).*/\1/')
  for e in $ENGINES; do
    case $e in
      sqlite) url="sqlite3://$WORK/v.db"; rm -f "$WORK"/v.db* ;;
      redis) url=$TESSERA_TEST_REDIS_URL; flush_redis ;;
      postgres) url=$TESSERA_TEST_PG_URL; drop_pg ;;
    esac
    read -r lsec lrss < <(measure "$T" load "$url" "$WORK/in.json")
    read -r dsec drss < <(measure "$T" dump "$url" "$WORK/out.json.gz")
    size=$(du -m "$WORK/out.json.gz" | cut -f1)
    awk -v n="$inodes" -v e="$e" -v ls="$lsec" -v lr="$lrss" -v ds="$dsec" -v dr="$drss" -v sz="$size" 'BEGIN {
      printf "| %d | %s | %.0f | %.0f MiB | %.0f | %.0f MiB | %d MiB gz |\n", n, e, n / ls, lr / 1024, n / ds, dr / 1024, sz }'
    case $e in redis) flush_redis ;; postgres) drop_pg ;; esac
  done
done
