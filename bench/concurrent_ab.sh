#!/usr/bin/env bash
# bench/concurrent_ab.sh — two tessera binaries measured AT THE SAME TIME:
# a mount of each (fresh volumes on the same engine server), and mdbench
# (bench/mdbench.c, the mdtest shape -b 6 -z 4 -I 8, 1 process each) on both
# at once. Load from other tenants of the machine then slows both sides
# alike, so the per-phase ratio AFTER/BEFORE holds still where alternating
# runs (bench/dirstats_overhead.sh) swing by ±20% on a noisy VM. The two
# sides share the two cores, so the ratio is that of their costs per
# operation, not of their rates alone. The launch order alternates by round.
# Each side runs a smaller mdbench before and after the measured one (not
# counted), so that neither side's first or last phase runs alone while the
# other is still starting or already done.
#
# With --quotas the AFTER side has a directory quota on / and a user quota
# on uid 0 (every operation charged to both).
#
# --shape "ARGS" sets the measured mdbench's shape (default -b 6 -z 4 -I 8;
# -z 5 makes the tree phases 9,331 directories instead of 1,555, long
# enough to measure).
#
# usage: bench/concurrent_ab.sh BEFORE AFTER [--rounds 4] [--engines "sqlite redis"] [--quotas] [--shape "ARGS"]
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
[ $# -ge 2 ] || { sed -n 2,14p "$0"; exit 2; }
BEFORE=$(realpath "$1"); AFTER=$(realpath "$2"); shift 2
ROUNDS=4 ENGINES="sqlite redis" QUOTAS=0 SHAPE="-b 6 -z 4 -I 8" FILLER="-b 6 -z 3 -I 8"
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --quotas) QUOTAS=1; shift ;;
    --shape) SHAPE=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ " $ENGINES " == *" redis "* ]] && [ -z "${TESSERA_TEST_REDIS_URL:-}" ]; then
  exec bash "$REPO/tests/tools/with-redis.sh" bash "$0" "$BEFORE" "$AFTER" --rounds "$ROUNDS" --engines "$ENGINES" \
    --shape "$SHAPE" $([ "$QUOTAS" = 1 ] && echo --quotas)
fi
WORK=$(mktemp -d /var/tmp/tessera-cab.XXXXXX)
cleanup() {
  for s in before after; do mountpoint -q "$WORK/$s/mnt" && { umount "$WORK/$s/mnt" || umount -l "$WORK/$s/mnt"; }; done
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$WORK/mdbench"

# A Redis URL of database n on the test server.
redis_db() { local u=$TESSERA_TEST_REDIS_URL; echo "${u%/*}/$1"; }

mount_side() {  # SIDE BINARY ENGINE
  local side=$1 bin=$2 engine=$3 meta
  rm -rf "$WORK/$side" && mkdir -p "$WORK/$side/mnt"
  case $engine in
    sqlite) meta="sqlite3://$WORK/$side/meta.db" ;;
    redis) meta=$(redis_db "$([ "$side" = before ] && echo 1 || echo 2)"); redis-cli -u "$meta" FLUSHDB >/dev/null ;;
  esac
  "$bin" format "$meta" "cab-$side" --bucket "$WORK/$side/bucket" --trash-days 0 >/dev/null
  if [ "$side" = after ] && [ "$QUOTAS" = 1 ]; then
    "$bin" quota set "$meta" --path / --capacity 1000 --inodes 1000000000 >/dev/null
    "$bin" quota set "$meta" --uid 0 --capacity 1000 --inodes 1000000000 >/dev/null
  fi
  "$bin" mount "$meta" "$WORK/$side/mnt" -d --log "$WORK/$side/mount.log" >/dev/null 2>&1
}

# The measured mdbench of a side, between two fillers (their results dropped).
side_run() {
  # shellcheck disable=SC2086
  "$WORK/mdbench" -d "$WORK/$1/mnt/fill1" $FILLER >/dev/null &&
    "$WORK/mdbench" -d "$WORK/$1/mnt/md" $SHAPE >"$WORK/$1.out" &&
    "$WORK/mdbench" -d "$WORK/$1/mnt/fill2" $FILLER >/dev/null
}

declare -A ratios
phases="dir_create file_create file_remove dir_remove tree_create tree_remove"
rate() { awk -v p="phase=$1" '$1 == "result" && index($0, p " ") {sub(/.*ops_per_sec=/, ""); print; exit}' "$2"; }
for engine in $ENGINES; do
  for round in $(seq "$ROUNDS"); do
    mount_side before "$BEFORE" "$engine"
    mount_side after "$AFTER" "$engine"
    first=before second=after
    [ $((round % 2)) = 0 ] && first=after second=before
    side_run "$first" &
    side_run "$second"
    wait
    line="round $round $engine:"
    for p in $phases; do
      b=$(rate "$p" "$WORK/before.out"); a=$(rate "$p" "$WORK/after.out")
      [ -n "$a" ] && [ -n "$b" ] || { echo "no $p result from mdbench" >&2; cat "$WORK"/*.out >&2; exit 1; }
      r=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}')
      ratios[$engine,$p]="${ratios[$engine,$p]:-} $r"
      line="$line $p=$r"
    done
    echo "$line" >&2
    umount "$WORK/before/mnt"; umount "$WORK/after/mnt"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
range() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%.3f–%.3f", a[1], a[NR]}'; }
echo "mdbench $SHAPE, 1 process on each side at once$([ "$QUOTAS" = 1 ] && echo "; after: with quotas on / and uid 0"); $ROUNDS rounds; $(nproc) cores, $(date -u '+%F %H:%M') UTC."
echo
echo "| engine | phase | after/before, median | range |"
echo "|---|---|---:|---|"
for engine in $ENGINES; do
  for p in $phases; do
    echo "| $engine | $p | $(median <<<"${ratios[$engine,$p]}") | $(range <<<"${ratios[$engine,$p]}") |"
  done
done
