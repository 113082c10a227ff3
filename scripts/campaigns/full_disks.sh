#!/usr/bin/env bash
# Full disks campaign: the bucket, the disk cache and the writeback staging
# area each on a small file system (tmpfs) that fills up.
#   bucket   (24 MiB): writers get ENOSPC promptly at close, the failed write
#            leaves nothing behind, every acknowledged file reads back, space
#            freed by deletions is usable again, fsck is clean;
#   cache    (32 MiB, --cache-size larger than the disk): reads stay correct,
#            the cache never takes the disk below --free-space-ratio free; and
#            on a roomy disk it never holds more than --cache-size;
#   staging  (32 MiB, --writeback): writes beyond what the staging disk holds
#            are uploaded directly and acknowledged; with the disk already
#            full (another file), too; after kill -9 of the client and a
#            remount, every acknowledged byte is there.
# Prints a summary line per part; exit 1 on any problem.
#   scripts/campaigns/full_disks.sh [--quick] [--rounds N]
# TESSERA: the binary (default build/src/tessera). Needs root (tmpfs mounts).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TESSERA=$(realpath "${TESSERA:-$REPO/build/src/tessera}")
ROUNDS=5
while [ $# -gt 0 ]; do
  case $1 in
    --quick) ROUNDS=2; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--rounds N]" >&2; exit 2 ;;
  esac
done
[ -x "$TESSERA" ] || { echo "full_disks: no tessera binary at $TESSERA (set TESSERA)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/tessera-fulldisks.XXXXXX)
MNT=$WORK/mnt
SMALL=$WORK/small
mkdir -p "$MNT" "$SMALL" "$WORK/ref"
PROBLEMS=0
log() { printf '[full_disks %s] %s\n' "$(date +%T)" "$*"; }
problem() { PROBLEMS=$((PROBLEMS + 1)); printf '[full_disks %s] PROBLEM: %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
  mountpoint -q "$MNT" && { "$TESSERA" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT"; }
  mountpoint -q "$SMALL" && umount -l "$SMALL"
  if [ "$PROBLEMS" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT
small_fs() {  # small_fs MiB: a fresh tmpfs of that size at $SMALL
  mountpoint -q "$SMALL" && umount "$SMALL"
  mount -t tmpfs -o "size=${1}m" tmpfs "$SMALL"
}
used_pct() { df --output=pcent "$1" | tail -1 | tr -dc '0-9'; }
mount_vol() { "$TESSERA" mount "$1" "$MNT" -d --log "$WORK/mount.log" "${@:2}" >/dev/null 2>&1; }
umount_vol() { "$TESSERA" umount "$MNT" >/dev/null 2>&1 || problem "umount failed"; }
# write_file PATH MiB: writes random data through the mount, keeps a copy in
# $WORK/ref; prints the errno of the write/close (0 = acknowledged) and the
# seconds it took.
write_file() {
  python3 - "$1" "$2" "$WORK/ref/$(basename "$1")" <<'PY'
import os, sys, time
path, mib, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = os.urandom(mib << 20)
t = time.time()
err = 0
try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    except OSError as e:
        err = e.errno
    try:
        os.close(fd)
    except OSError as e:
        err = err or e.errno
except OSError as e:
    err = e.errno
if err == 0:
    with open(ref, "wb") as f:
        f.write(data)
print(err, "%.1f" % (time.time() - t))
PY
}
verify_acked() {  # every file with a reference copy reads back the same
  local n=0 f
  echo 3 >/proc/sys/vm/drop_caches
  for f in "$WORK"/ref/*; do
    [ -e "$f" ] || continue
    cmp -s "$f" "$MNT/$(basename "$f")" || problem "$1: acknowledged file $(basename "$f") reads back wrong"
    n=$((n + 1))
  done
  echo "$n"
}

# ---------------------------------------------------------------- bucket
small_fs 24
META="sqlite3://$WORK/bucket.db"
"$TESSERA" format "$META" full-bucket --bucket "$SMALL/bucket" --trash-days 0 >/dev/null 2>&1
mount_vol "$META"
enospc=0
for round in $(seq 1 "$ROUNDS"); do
  i=0
  while :; do  # 6 MiB files until the bucket refuses one
    i=$((i + 1))
    read -r err secs <<<"$(write_file "$MNT/r$round-$i" 6)"
    [ "$err" = 0 ] && continue
    [ "$err" = 28 ] || problem "bucket: a write into the full bucket failed with errno $err, want ENOSPC (28)"
    awk -v s="$secs" 'BEGIN { exit !(s > 15) }' && problem "bucket: ENOSPC took $secs s"
    enospc=$((enospc + 1))
    size=$(stat -c %s "$MNT/r$round-$i")
    [ "$size" = 0 ] || problem "bucket: the failed file shows $size bytes"
    rm -f "$MNT/r$round-$i"
    break
  done
  verify_acked bucket >/dev/null
  # Free the space: the next round must fit again.
  for f in "$WORK"/ref/r"$round"-*; do rm -f "$MNT/$(basename "$f")" "$f"; done
  for _ in $(seq 1 100); do [ "$(used_pct "$SMALL")" -lt 15 ] && break; sleep 0.1; done
  [ "$(used_pct "$SMALL")" -lt 15 ] || problem "bucket: round $round: deleted files' blocks not freed ($(used_pct "$SMALL")% used)"
done
umount_vol
"$TESSERA" fsck "$META" >/dev/null || problem "bucket: fsck"
log "bucket: $ROUNDS rounds, $enospc ENOSPC at close, space reclaimed each round, problems $PROBLEMS"
rm -f "$WORK"/ref/*

# ---------------------------------------------------------------- cache
META="sqlite3://$WORK/cache.db"
"$TESSERA" format "$META" full-cache --bucket "$WORK/cache-bucket" --trash-days 0 >/dev/null 2>&1
mount_vol "$META"
for i in 1 2 3; do read -r err _ <<<"$(write_file "$MNT/c$i" 40)"; [ "$err" = 0 ] || problem "cache: setup write $i: errno $err"; done
umount_vol
small_fs 32
mount_vol "$META" --cache-dir "$SMALL/cache" --cache-size 1024 --free-space-ratio 0.2 --mem-cache-size 0
max=0
for round in $(seq 1 "$ROUNDS"); do
  n=$(verify_acked cache)
  p=$(used_pct "$SMALL")
  [ "$p" -gt "$max" ] && max=$p
done
[ "$max" -le 82 ] || problem "cache: the cache disk reached $max% used (--free-space-ratio 0.2 keeps 20% free)"
umount_vol
mountpoint -q "$SMALL" && umount "$SMALL"
mount_vol "$META" --cache-dir "$WORK/cache2" --cache-size 16 --mem-cache-size 0
verify_acked cache >/dev/null
cached=$(du -sm "$WORK/cache2" | cut -f1)
[ "$cached" -le 17 ] || problem "cache: $cached MiB cached with --cache-size 16"
umount_vol
log "cache: $ROUNDS rounds over $n files of 40 MiB, small cache disk at most $max% used, 16 MiB cache held $cached MiB, problems $PROBLEMS"
rm -f "$WORK"/ref/*

# ---------------------------------------------------------------- staging
small_fs 32
META="sqlite3://$WORK/staging.db"
"$TESSERA" format "$META" full-staging --bucket "$WORK/staging-bucket" --trash-days 0 >/dev/null 2>&1
mount_vol "$META" --writeback --cache-dir "$SMALL/cache" --upload-delay 60
for i in $(seq 1 "$ROUNDS"); do
  read -r err _ <<<"$(write_file "$MNT/s$i" 20)"  # more than the staging disk holds across rounds
  [ "$err" = 0 ] || problem "staging: a write with the staging disk full failed with errno $err (must go straight to the store)"
done
head -c $(( ($(df --output=avail -B1 "$SMALL" | tail -1) - (512 << 10)) )) /dev/zero >"$SMALL/filler" 2>/dev/null || true
read -r err _ <<<"$(write_file "$MNT/after-filler" 8)"
[ "$err" = 0 ] || problem "staging: a write with the staging disk completely full failed with errno $err"
pid=$(pgrep -f "tessera mount $META $MNT" | head -1)
kill -9 "$pid"
sleep 0.5
umount -l "$MNT" 2>/dev/null || true
rm -f "$SMALL/filler"
mount_vol "$META" --writeback --cache-dir "$SMALL/cache"
n=$(verify_acked staging)
umount_vol
"$TESSERA" fsck "$META" >/dev/null || problem "staging: fsck"
fallbacks=$(grep -c "cannot stage" "$WORK/mount.log" || true)
log "staging: $n acknowledged files verified after kill -9 and remount, $fallbacks block batch(es) uploaded directly because the staging disk was full, problems $PROBLEMS"

log "done: $PROBLEMS problem(s)"
[ "$PROBLEMS" -eq 0 ]
