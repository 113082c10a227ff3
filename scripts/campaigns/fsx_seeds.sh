#!/usr/bin/env bash
# fsx over many seeds: tests/e2e/fsx.cc in its harshest mode (-Z -A: O_DIRECT
# and kernel AIO interleaved with buffered I/O, mmap, fallocate zero ranges,
# copy_file_range), two fsx processes at once on one mount (each on its own
# file), on a default mount and on a --writeback mount of fresh volumes
# (SQLite + local bucket, 64 KiB blocks). Races between the kernel's caches,
# the write buffer and commits show up as wrong bytes or sizes here; every
# failing seed is printed with the tail of its log (replay it with
# e2e_fsx -S SEED -Z -A ...).
#
#   scripts/campaigns/fsx_seeds.sh [--seeds N] [--ops N] [--quick]
#     --seeds N  seed pairs per mount (default 20; --quick 2); seeds are
#                100*i and 100*i+1 for i = 1..N
#     --ops N    operations per fsx run (default 8000; --quick 2000)
# TESSERA (default build/src/tessera) and FSX (default build/tests/e2e/e2e_fsx).
# Needs root and /dev/fuse. Prints one summary line per mount; exit 1 if any
# run failed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TESSERA=$(realpath "${TESSERA:-$REPO/build/src/tessera}")
FSX=$(realpath "${FSX:-$REPO/build/tests/e2e/e2e_fsx}")
SEEDS=20
OPS=8000
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) SEEDS=${2:?}; shift 2 ;;
    --ops) OPS=${2:?}; shift 2 ;;
    --quick) SEEDS=2; OPS=2000; shift ;;
    *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ -x "$TESSERA" ] && [ -x "$FSX" ] || { echo "fsx_seeds: need $TESSERA and $FSX (build first)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/tessera-fsxseeds.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  mountpoint -q "$MNT" 2>/dev/null && { "$TESSERA" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT"; }
  [ "${FAILED:-0}" = 0 ] && rm -rf "$WORK" || echo "kept $WORK" >&2
}
trap cleanup EXIT
log() { printf '[fsx_seeds %s] %s\n' "$(date +%T)" "$*"; }

FAILED=0
for mode in default writeback; do
  vol=$WORK/$mode
  mkdir -p "$vol" "$MNT"
  "$TESSERA" format "sqlite3://$vol/meta.db" "fsx-$mode" --bucket "$vol/bucket" --block-size 64 --trash-days 0 >/dev/null 2>&1
  extra=()
  [ "$mode" = writeback ] && extra=(--writeback)
  "$TESSERA" mount "sqlite3://$vol/meta.db" "$MNT" -d --cache-dir "$vol/cache" --log "$vol/mount.log" "${extra[@]}" >/dev/null
  runs=0
  failed=0
  for i in $(seq 1 "$SEEDS"); do
    for k in 0 1; do
      "$FSX" -q -N "$OPS" -S $((i * 100 + k)) -Z -A -b 65536 -l 8M "$MNT/f-$k" >"$vol/fsx-$((i * 100 + k)).log" 2>&1 &
    done
    wait || true  # the logs tell
    for k in 0 1; do
      seed=$((i * 100 + k))
      runs=$((runs + 1))
      if ! grep -q "OK:" "$vol/fsx-$seed.log"; then
        failed=$((failed + 1))
        log "FAILED: $mode seed $seed:"
        tail -5 "$vol/fsx-$seed.log" >&2
      fi
    done
  done
  "$TESSERA" umount "$MNT" >/dev/null
  log "$mode: $runs runs of $OPS operations ($((runs * OPS)) in all), $failed failed"
  FAILED=$((FAILED + failed))
done
log "done: $FAILED failed run(s)"
[ "$FAILED" = 0 ]
