#!/usr/bin/env bash
# bench/datapath_ab.sh — two tessera binaries (A: before, B: after a data
# path change) side by side with the local file system, in alternating
# rounds of one run, all over tmpfs (Tessera's SQLite file and bucket too):
#  - fio sequential write, 1 MiB, direct, 1 job and 2 jobs (own files), end fsync;
#  - fio random read, 4 KiB, libaio qd8, direct, page cache dropped first.
# usage: bench/datapath_ab.sh TESSERA_A TESSERA_B [--rounds 3] [--size 512m] [--runtime 10] [--read-size 256m]
# (--read-size: the random-read file; past the 256 MiB memory block cache,
# reads miss it and go to the bucket's files)
# Prints a markdown table of the medians (MiB/s; IOPS for reads) and B/A, B/local.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0"; exit 2; }
A=$(realpath "$1") B=$(realpath "$2"); shift 2
ROUNDS=3 SIZE=512m RUNTIME=10 READ_SIZE=256m
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --runtime) RUNTIME=$2; shift 2 ;;
    --read-size) READ_SIZE=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
W=$(mktemp -d /dev/shm/tessera-ab.XXXXXX)
cleanup() {
  mountpoint -q "$W/mnt" && { umount "$W/mnt" || umount -l "$W/mnt"; }
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/mnt"

fio_json() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(round(j["write"]["bw"]/1024) if sys.argv[2]=="w" else round(j["read"]["iops"]))' "$@"; }

run_target() {  # name -> "seqwrite1=.. seqwrite2=.. randread=.."
  local name=$1 dir=$W/mnt
  rm -rf "$W/vol" && mkdir -p "$W/vol"
  case $name in
    local) dir=$W/vol ;;
    A | B)
      local bin=$A
      [ "$name" = B ] && bin=$B
      "$bin" format "sqlite3://$W/vol/meta.db" abvol --bucket "$W/vol/bucket" --trash-days 0 >/dev/null
      "$bin" mount "sqlite3://$W/vol/meta.db" "$W/mnt" -d --log "$W/vol/mount.log" >/dev/null ;;
  esac
  local out=""
  for jobs in 1 2; do
    fio --name=sw --directory="$dir" --rw=write --bs=1M --size="$SIZE" --direct=1 --numjobs="$jobs" \
      --end_fsync=1 --group_reporting --output-format=json >"$W/fio.json"
    out="$out seqwrite_${jobs}job=$(fio_json "$W/fio.json" w)"
    rm -f "$dir"/sw.*
  done
  fio --name=lay --directory="$dir" --filename=rr --rw=write --bs=1M --size="$READ_SIZE" --end_fsync=1 >/dev/null
  sync; echo 3 >/proc/sys/vm/drop_caches
  fio --name=rr --directory="$dir" --filename=rr --rw=randread --bs=4k --size="$READ_SIZE" --direct=1 --ioengine=libaio \
    --iodepth=8 --time_based --runtime="$RUNTIME" --output-format=json >"$W/fio.json"
  out="$out randread_4k_qd8=$(fio_json "$W/fio.json" r)"
  if [ "$name" != local ]; then "$A" umount "$W/mnt"; fi
  echo "$out"
}

declare -A vals
for round in $(seq "$ROUNDS"); do
  for t in local A B; do
    line=$(run_target "$t")
    echo "round $round $t:$line" >&2
    for kv in $line; do vals[$t,${kv%%=*}]="${vals[$t,${kv%%=*}]:-} ${kv#*=}"; done
  done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "| job | local | A | B | B/A | B/local |"
echo "|---|---|---|---|---|---|"
for k in seqwrite_1job seqwrite_2job randread_4k_qd8; do
  l=$(med <<<"${vals[local,$k]}") a=$(med <<<"${vals[A,$k]}") b=$(med <<<"${vals[B,$k]}")
  awk -v k="$k" -v l="$l" -v a="$a" -v b="$b" 'BEGIN {printf "| %s | %d | %d | %d | %.2f | %.2f |\n", k, l, a, b, b / a, b / l}'
done
