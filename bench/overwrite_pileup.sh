#!/usr/bin/env bash
# bench/overwrite_pileup.sh — does deletion keep up with writers that
# overwrite their files in place? fio sequential 1 MiB direct writes,
# time-based, so each job wraps around its file and overwrites it while
# keeping it open (the shape of issue 14's report: three 12 s jobs over
# 512 MiB files). Samples the bucket's size every second during and after
# the run; prints the peak, the size after close and the throughput.
# SQLite + local directory, both on DIR (default /dev/shm: tmpfs).
# usage: bench/overwrite_pileup.sh TESSERA [--jobs 3] [--size 512m] [--runtime 12] [--dir DIR] [--trash-days N]
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,10p "$0"; exit 2; }
T=$(realpath "$1"); shift
JOBS=3 SIZE=512m RUNTIME=12 DIR=/dev/shm TRASH=1
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) JOBS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --runtime) RUNTIME=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --trash-days) TRASH=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
W=$(mktemp -d "$DIR/tessera-pileup.XXXXXX")
MON=
cleanup() {
  [ -n "$MON" ] && kill "$MON" 2>/dev/null || true
  mountpoint -q "$W/mnt" && { "$T" umount "$W/mnt" || umount -l "$W/mnt"; }
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/mnt"
"$T" format "sqlite3://$W/meta.db" pileup --bucket "$W/bucket" --trash-days "$TRASH" >/dev/null
"$T" mount "sqlite3://$W/meta.db" "$W/mnt" -d --log "$W/mount.log" >/dev/null
(while true; do { du -sm "$W/bucket" 2>/dev/null || true; } | cut -f1 >>"$W/samples"; sleep 1; done) &
MON=$!
fio --name=sw --directory="$W/mnt" --rw=write --bs=1M --size="$SIZE" --direct=1 --numjobs="$JOBS" \
  --time_based --runtime="$RUNTIME" --group_reporting --output-format=json >"$W/fio.json"
sleep 3
kill "$MON"; wait "$MON" 2>/dev/null || true; MON=
python3 - "$W/fio.json" "$W/samples" "$JOBS" "$SIZE" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["write"]
samples = [int(x) for x in open(sys.argv[2]).read().split()]
print(f"jobs {sys.argv[3]} x {sys.argv[4]}: {job['bw'] / 1024:.0f} MiB/s, {job['io_bytes'] / 2**20:.0f} MiB written; "
      f"bucket peak {max(samples)} MiB, {samples[-1]} MiB 3 s after the writers closed")
PY
