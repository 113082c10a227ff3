#!/usr/bin/env bash
# bench/dirstats_overhead.sh — what directory statistics cost on the
# metadata path: mdbench (bench/mdbench.c, the mdtest shape of the JuiceFS
# seed: -b 6 -z 4 -I 8, 1 process, empty files) through a mount of a build
# WITHOUT them (BEFORE: a tessera binary of an earlier commit) and one WITH
# them (AFTER), alternating rounds in one run, on SQLite and on Redis (a
# private redis-server, tests/tools/with-redis.sh).
#
# With --quotas the AFTER runs have a directory quota on the root and a user
# quota on uid 0 (limits far away): every operation is charged to both. Give
# the same binary twice to measure quotas alone. --quotas-both puts them on
# both sides (to compare two builds' quota paths).
#
# usage: bench/dirstats_overhead.sh BEFORE AFTER [--rounds 3] [--engines "sqlite redis"] [--shape "-b 6 -z 4 -I 8"] [--quotas|--quotas-both]
# Prints a markdown table of the median rates (ops/s) and AFTER/BEFORE.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
[ $# -ge 2 ] || { sed -n 2,10p "$0"; exit 2; }
BEFORE=$(realpath "$1"); AFTER=$(realpath "$2"); shift 2
ROUNDS=3
ENGINES="sqlite redis"
SHAPE="-b 6 -z 4 -I 8"
QUOTAS=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --shape) SHAPE=$2; shift 2 ;;
    --quotas) QUOTAS=1; shift ;;
    --quotas-both) QUOTAS=2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ " $ENGINES " == *" redis "* ]] && [ -z "${TESSERA_TEST_REDIS_URL:-}" ]; then
  exec bash "$REPO/tests/tools/with-redis.sh" bash "$0" "$BEFORE" "$AFTER" --rounds "$ROUNDS" --engines "$ENGINES" \
    --shape "$SHAPE" $([ "$QUOTAS" = 1 ] && echo --quotas) $([ "$QUOTAS" = 2 ] && echo --quotas-both)
fi
WORK=$(mktemp -d /var/tmp/tessera-dsbench.XXXXXX)
cleanup() {
  mountpoint -q "$WORK/mnt" && { "$AFTER" umount "$WORK/mnt" || umount -l "$WORK/mnt"; }
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$WORK/mdbench"
mkdir -p "$WORK/mnt"

run_one() {  # BINARY ENGINE QUOTAS -> mdbench result lines in $WORK/out
  local t=$1 engine=$2 quotas=$3 meta
  rm -rf "$WORK/bucket" "$WORK/meta.db"*
  case $engine in
    sqlite) meta="sqlite3://$WORK/meta.db" ;;
    redis) meta=$TESSERA_TEST_REDIS_URL; redis-cli -u "$meta" FLUSHALL >/dev/null ;;
  esac
  "$t" format "$meta" dsbench --bucket "$WORK/bucket" --trash-days 0 >/dev/null
  if [ "$quotas" = 1 ]; then
    "$t" quota set "$meta" --path / --capacity 1000 --inodes 1000000000 >/dev/null
    "$t" quota set "$meta" --uid 0 --capacity 1000 --inodes 1000000000 >/dev/null
  fi
  "$t" mount "$meta" "$WORK/mnt" -d --log "$WORK/mount.log" >/dev/null 2>&1
  local pid server=""
  pid=$(pgrep -f -n "mount $meta $WORK/mnt") || { echo "cannot find the client process" >&2; exit 1; }
  [ "$engine" = redis ] && server=$(pgrep -f -n "redis-server .*:${meta##*:}" || pgrep -n redis-server)
  local c0 s0
  c0=$(cpu_ms "$pid"); s0=$([ -n "$server" ] && cpu_ms "$server" || echo 0)
  # shellcheck disable=SC2086
  "$WORK/mdbench" -d "$WORK/mnt/md" $SHAPE >"$WORK/out"
  CLIENT_MS=$(($(cpu_ms "$pid") - c0)); SERVER_MS=$(($([ -n "$server" ] && cpu_ms "$server" || echo 0) - s0))
  # Engine requests of the whole run (the mount's .stats): not slowed or
  # sped up by the machine's load, unlike the rates.
  local stats
  stats=$(cat "$WORK/mnt/.stats")
  REQUESTS=$(awk '/^tessera_meta_op_duration_seconds_count/ {n += $NF} END {print n + 0}' <<<"$stats")
  GETATTRS=$(awk '/^tessera_meta_op_duration_seconds_count.*op="getattr"/ {n += $NF} END {print n + 0}' <<<"$stats")
  "$t" umount "$WORK/mnt"
}
# CPU time (user + system, ms) a process used so far.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / hz)}' "/proc/$1/stat"; }
declare -A rates
phases="dir_create file_create file_remove dir_remove tree_create tree_remove"
for engine in $ENGINES; do
  for round in $(seq "$ROUNDS"); do
    for which in before after; do
      bin=$BEFORE; [ "$which" = after ] && bin=$AFTER
      q=0; { [ "$which" = after ] && [ "$QUOTAS" != 0 ]; } || [ "$QUOTAS" = 2 ] && q=1
      run_one "$bin" "$engine" "$q"
      for p in $phases; do
        r=$(awk -v p="phase=$p" '$1 == "result" && index($0, p " ") {sub(/.*ops_per_sec=/, ""); print; exit}' "$WORK/out")
        [ -n "$r" ] || { echo "no $p result from mdbench:" >&2; cat "$WORK/out" >&2; exit 1; }
        rates[$engine,$which,$p]="${rates[$engine,$which,$p]:-} $r"
      done
      rates[$engine,$which,client_cpu]="${rates[$engine,$which,client_cpu]:-} $CLIENT_MS"
      rates[$engine,$which,server_cpu]="${rates[$engine,$which,server_cpu]:-} $SERVER_MS"
      rates[$engine,$which,requests]="${rates[$engine,$which,requests]:-} $REQUESTS"
      rates[$engine,$which,getattrs]="${rates[$engine,$which,getattrs]:-} $GETATTRS"
    done
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%.0f–%.0f", a[1], a[NR]}'; }
echo "mdbench $SHAPE, 1 process$([ "$QUOTAS" = 1 ] && echo "; after: with quotas on / and uid 0")$([ "$QUOTAS" = 2 ] && echo "; both: with quotas on / and uid 0"); median of $ROUNDS alternating rounds; $(nproc) cores, $(date -u '+%F %H:%M') UTC."
echo
echo "| engine | phase | before ops/s (range) | after ops/s (range) | after/before (medians) |"
echo "|---|---|---:|---:|---:|"
for engine in $ENGINES; do
  for p in $phases; do
    b=$(median <<<"${rates[$engine,before,$p]}"); a=$(median <<<"${rates[$engine,after,$p]}")
    br=$(range <<<"${rates[$engine,before,$p]}"); ar=$(range <<<"${rates[$engine,after,$p]}")
    echo "| $engine | $p | $b ($br) | $a ($ar) | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}') |"
  done
done
echo
echo "CPU time of one mdbench run (all phases; ms, median and range): the client process, and redis-server."
echo "Less noisy than the rates: another process's load slows a run but does not add to its CPU time."
echo
echo "| engine | process | before ms (range) | after ms (range) | after/before (medians) |"
echo "|---|---|---:|---:|---:|"
for engine in $ENGINES; do
  for p in client_cpu server_cpu; do
    [ "$engine" = sqlite ] && [ "$p" = server_cpu ] && continue
    b=$(median <<<"${rates[$engine,before,$p]}"); a=$(median <<<"${rates[$engine,after,$p]}")
    br=$(range <<<"${rates[$engine,before,$p]}"); ar=$(range <<<"${rates[$engine,after,$p]}")
    echo "| $engine | ${p%_cpu} | $b ($br) | $a ($ar) | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}') |"
  done
done
echo
echo "Engine requests of one mdbench run (all phases; the mount's .stats; median and range): all, and getattr alone."
echo
echo "| engine | requests | before (range) | after (range) | after/before (medians) |"
echo "|---|---|---:|---:|---:|"
for engine in $ENGINES; do
  for p in requests getattrs; do
    b=$(median <<<"${rates[$engine,before,$p]}"); a=$(median <<<"${rates[$engine,after,$p]}")
    br=$(range <<<"${rates[$engine,before,$p]}"); ar=$(range <<<"${rates[$engine,after,$p]}")
    echo "| $engine | $p | $b ($br) | $a ($ar) | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}') |"
  done
done
