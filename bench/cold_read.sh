#!/usr/bin/env bash
# bench/cold_read.sh — the cold read path: a sequential read through a fresh
# Tessera mount of data in no cache, against the object store alone reading
# the same amount of data in the same object size (`tessera objbench
# --drop-caches`, and `cat` of the file's own block objects in block order).
#
# usage: bench/cold_read.sh [--size MiB] [--rounds N] [--workdir DIR] [--tessera BIN]
# Needs root (drop_caches). Prints a markdown table.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZE=1024 ROUNDS=3 WORKDIR=/var/tmp/tessera-cold TESSERA="$REPO/build/src/tessera" THREADS=4
while (($#)); do
    case $1 in
        --size) SIZE=$2; shift ;;
        --rounds) ROUNDS=$2; shift ;;
        --workdir) WORKDIR=$2; shift ;;
        --tessera) TESSERA=$2; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "cold_read.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "cold_read.sh: needs root to drop the page cache" >&2; exit 2; }

MNT=$WORKDIR/mnt META="sqlite3://$WORKDIR/meta.db"
cleanup() { mountpoint -q "$MNT" && "$TESSERA" umount "$MNT" >/dev/null 2>&1 || true; rm -rf "$WORKDIR"; }
trap cleanup EXIT
cleanup
mkdir -p "$WORKDIR/bucket" "$MNT" "$WORKDIR/objbench"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
mbps() { python3 -c "import sys; print(f'{$1 / 1048576 / float(sys.argv[1]):.0f}')" "$2"; }

"$TESSERA" format "$META" coldvol --bucket "$WORKDIR/bucket" >/dev/null 2>&1 || { echo "cold_read.sh: format failed" >&2; exit 1; }
"$TESSERA" mount "$META" "$MNT" -d --log "$WORKDIR/mount.log" >/dev/null 2>&1 || { echo "cold_read.sh: mount failed (see $WORKDIR/mount.log)" >&2; exit 1; }
head -c $((SIZE << 20)) /dev/urandom >"$MNT/big"
"$TESSERA" umount "$MNT" >/dev/null
BYTES=$((SIZE << 20))

echo "| round | objbench get big object, cold (MiB/s) | cat of the file's block objects, cold (MiB/s) | dd bs=1M through a fresh mount, cold (MiB/s) | mount / objbench | mount / cat |"
echo "|---|---:|---:|---:|---:|---:|"
for r in $(seq 1 "$ROUNDS"); do
    ob=$("$TESSERA" objbench --storage file --bucket "$WORKDIR/objbench" --big-object-size "$SIZE" \
        --small-objects 0 -p "$THREADS" --drop-caches 2>&1 | awk -F'|' '/get big object/ {if (match($3, /[0-9.]+/)) print substr($3, RSTART, RLENGTH)}')
    rm -rf "$WORKDIR/objbench"/*
    drop
    t0=$(date +%s.%N)
    find "$WORKDIR/bucket" -type f -name '*_*_*' | awk -F/ '{split($NF, a, "_"); print a[1], a[2], $0}' |
        sort -n -k1,1 -k2,2 | awk '{print $3}' | xargs cat >/dev/null
    t1=$(date +%s.%N)
    cat_mbps=$(mbps "$BYTES" "$(echo "$t1 - $t0" | bc -l)")
    drop
    "$TESSERA" mount "$META" "$MNT" -d --log "$WORKDIR/mount.log" >/dev/null 2>&1 || { echo "cold_read.sh: mount failed (see $WORKDIR/mount.log)" >&2; exit 1; }
    t0=$(date +%s.%N)
    dd if="$MNT/big" of=/dev/null bs=1M status=none
    t1=$(date +%s.%N)
    "$TESSERA" umount "$MNT" >/dev/null
    dd_mbps=$(mbps "$BYTES" "$(echo "$t1 - $t0" | bc -l)")
    python3 - "$r" "$ob" "$cat_mbps" "$dd_mbps" <<'EOF'
import sys
r, ob, c, d = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3]), float(sys.argv[4])
ratio = lambda a, b: f"{a / b:.2f}×" if b else "—"
print(f"| {r} | {ob:,.0f} | {c:,.0f} | {d:,.0f} | {ratio(d, ob)} | {ratio(d, c)} |")
EOF
done
echo
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), ${SIZE} MiB, 4 MiB blocks, objbench -p $THREADS"
