#!/usr/bin/env bash
# bench/metrics_overhead.sh — what observability costs: the same tessera
# binary mounted without --metrics (off) and with --metrics and a scraper
# fetching /metrics every second (on; .accesslog not read), alternating
# rounds in one run, SQLite + local directory:
#  - fio 4 KiB random reads, libaio, iodepth 8, direct I/O, on a 256 MiB file
#    written before (the page cache is dropped first);
#  - mdbench (bench/mdbench.c, the mdtest shape of the JuiceFS seed: -b 6
#    -z 4 -I 8, 1 process, empty files).
# usage: bench/metrics_overhead.sh TESSERA [--rounds 3] [--runtime 15] [--md-only]
# Prints a markdown table of the medians and on/off, including the mount
# process's CPU time per mdbench operation (steadier than throughput on a
# noisy host: other tenants slow the clock, not the work).
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 1 ] || { sed -n 2,12p "$0"; exit 2; }
T=$(realpath "$1"); shift
ROUNDS=3
RUNTIME=15
MD_ONLY=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --runtime) RUNTIME=$2; shift 2 ;;
    --md-only) MD_ONLY=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d /var/tmp/tessera-mbench.XXXXXX)
SCRAPER=
cleanup() {
  [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null || true
  mountpoint -q "$WORK/mnt" && { "$T" umount "$WORK/mnt" || umount -l "$WORK/mnt"; }
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$WORK/mdbench"
mkdir -p "$WORK/mnt"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

run_one() {  # on|off -> "randread_iops md_phase=rate..." in $WORK/out
  local mode=$1
  rm -rf "$WORK/bucket" "$WORK/meta.db"*
  "$T" format "sqlite3://$WORK/meta.db" mbench --bucket "$WORK/bucket" --trash-days 0 >/dev/null
  local args=()
  [ "$mode" = on ] && args=(--metrics "127.0.0.1:$PORT")
  "$T" mount "sqlite3://$WORK/meta.db" "$WORK/mnt" -d --log "$WORK/mount.log" "${args[@]}" >/dev/null 2>&1
  if [ "$mode" = on ]; then
    (while true; do curl -sf "http://127.0.0.1:$PORT/metrics" >/dev/null || true; sleep 1; done) &
    SCRAPER=$!
  fi
  local iops=""
  if [ "$MD_ONLY" = 0 ]; then
    fio --name=lay --directory="$WORK/mnt" --filename=rr --rw=write --bs=1M --size=256M --end_fsync=1 >/dev/null
    sync; echo 3 >/proc/sys/vm/drop_caches
    fio --name=rr --directory="$WORK/mnt" --filename=rr --rw=randread --bs=4k --size=256M --direct=1 \
      --ioengine=libaio --iodepth=8 --time_based --runtime="$RUNTIME" --output-format=json >"$WORK/fio.json"
    iops="randread_4k_qd8=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]))' "$WORK/fio.json")"
  fi
  local pid cpu0 cpu1
  pid=$(pgrep -f "tessera mount sqlite3://$WORK/meta.db" | head -1)
  cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$WORK/mdbench" -d "$WORK/mnt/md" -b 6 -z 4 -I 8 >"$WORK/md.out"
  cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  local ops
  ops=$(awk '$1 == "result" {o=$0; sub(/.*ops=/, "", o); sub(/ .*/, "", o); t += o} END {print t}' "$WORK/md.out")
  local cpu_us
  cpu_us=$(awk -v c=$((cpu1 - cpu0)) -v hz="$(getconf CLK_TCK)" -v n="$ops" 'BEGIN {printf "%.2f", c / hz * 1e6 / n}')
  if [ -n "$SCRAPER" ]; then kill "$SCRAPER"; wait "$SCRAPER" 2>/dev/null || true; SCRAPER=; fi
  "$T" umount "$WORK/mnt"
  echo "$iops mount_cpu_us_per_md_op=$cpu_us $(awk '$1 == "result" {p=$0; sub(/.*phase=/, "", p); sub(/ .*/, "", p); r=$0; sub(/.*ops_per_sec=/, "", r); printf "%s=%s ", p, r}' "$WORK/md.out")"
}
if [ "${SCRAPE_ONLY:-0}" = 1 ]; then ROUNDS=0; fi
declare -A rates
keys="randread_4k_qd8 mount_cpu_us_per_md_op dir_create dir_stat file_create file_stat file_read file_remove dir_remove tree_create tree_remove"
for round in $(seq "$ROUNDS"); do
  for mode in off on; do
    line=$(run_one "$mode")
    echo "round $round $mode: $line" >&2
    for kv in $line; do rates[$mode,${kv%%=*}]="${rates[$mode,${kv%%=*}]:-} ${kv#*=}"; done
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%.0f–%.0f", a[1], a[NR]}'; }
# What one scrape costs the mount: CPU seconds of the mount process over
# 300 scrapes (of a mount that served the workload above: every series exists).
scrape_cost() {
  rm -rf "$WORK/bucket" "$WORK/meta.db"*
  "$T" format "sqlite3://$WORK/meta.db" mbench --bucket "$WORK/bucket" --trash-days 0 >/dev/null
  "$T" mount "sqlite3://$WORK/meta.db" "$WORK/mnt" -d --log "$WORK/mount.log" --metrics "127.0.0.1:$PORT" >/dev/null 2>&1
  "$WORK/mdbench" -d "$WORK/mnt/md" -b 4 -z 2 -I 4 >/dev/null
  local pid cpu0 cpu1 bytes
  pid=$(pgrep -f "tessera mount sqlite3://$WORK/meta.db" | head -1)
  cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
  bytes=$(curl -sf "http://127.0.0.1:$PORT/metrics" | wc -c)
  cpu0=$(cpu)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/metrics" >/dev/null; done
  cpu1=$(cpu)
  "$T" umount "$WORK/mnt"
  awk -v c=$((cpu1 - cpu0)) -v hz="$(getconf CLK_TCK)" -v b="$bytes" \
    'BEGIN {printf "One scrape (%d bytes of text) costs the mount %.2f ms of CPU: at one scrape a second, %.2f%% of one core.\n", b, c / hz / 300 * 1000, c / hz / 300 * 100}'
}
SCRAPE=$(scrape_cost)
echo "SQLite + local directory; on: --metrics with a scrape every second; median of $ROUNDS alternating rounds; $(nproc) cores, $(date -u '+%F %H:%M') UTC."
echo
echo "| workload | off (range) | on (range) | on/off (medians) |"
echo "|---|---:|---:|---:|"
for k in $keys; do
  [ -n "${rates[off,$k]:-}" ] || continue
  b=$(median <<<"${rates[off,$k]}"); a=$(median <<<"${rates[on,$k]}")
  echo "| $k | $b ($(range <<<"${rates[off,$k]}")) | $a ($(range <<<"${rates[on,$k]}")) | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}') |"
done
echo
echo "$SCRAPE"
