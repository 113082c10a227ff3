#!/usr/bin/env bash
# End-to-end suite against a real mount of a fresh volume (SQLite + local
# directory, small block size so chunk/block boundaries are crossed often).
# Usage: run_e2e.sh TESSERA_BINARY E2E_BIN_DIR [SUITE...]
# Suites: posix fsx compact concurrency persist build twomounts crash fsck (default: all).
# TESSERA_E2E_QUICK=1 shortens the random workloads (sanitizer builds).
set -euo pipefail
TESSERA=$(realpath "$1")
BIN=$(realpath "$2")
shift 2
SUITES=${*:-posix fsx compact concurrency persist build twomounts crash fsck}
QUICK=${TESSERA_E2E_QUICK:-0}

WORK=$(mktemp -d /tmp/tessera-e2e.XXXXXX)
MNT=$WORK/mnt
META="sqlite3://$WORK/meta.db"
mkdir -p "$MNT"
chmod 755 "$WORK"

cleanup() {
  for m in "$MNT" "$WORK/mnt2"; do
    if mountpoint -q "$m"; then "$TESSERA" umount "$m" -f || umount -l "$m" || true; fi
  done
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

log() { printf '[e2e] %s\n' "$*"; }
mount_volume() {
  "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" "$@"
}
unmount_volume() { "$TESSERA" umount "$MNT"; }
fail() {
  echo "[e2e] FAILED: $*" >&2
  echo "[e2e] ---- mount log (tail)" >&2
  tail -50 "$WORK/mount.log" >&2 || true
  exit 1
}

"$TESSERA" format "$META" e2e-vol --bucket "$WORK/bucket" --block-size 64 >/dev/null
mount_volume
chmod 777 "$MNT"

for suite in $SUITES; do
  case $suite in
  posix)
    log "POSIX suite"
    for t in "$BIN"/e2e_posix*_test; do
      d="$MNT/posix-$(basename "$t")"
      mkdir -p "$d" && chmod 777 "$d"
      TESSERA_TEST_DIR="$d" "$t" --gtest_brief=1 || fail "$(basename "$t")"
    done
    ;;
  fsx)
    N=15000
    [ "$QUICK" = 1 ] && N=3000
    for seed in 1 2; do
      log "fsx seed $seed ($N ops, 64 KiB blocks)"
      "$BIN/e2e_fsx" -N "$N" -S "$seed" -b 65536 -l $((8 << 20)) "$MNT/fsx-$seed" >"$WORK/fsx-$seed.log" 2>&1 ||
        { tail -40 "$WORK/fsx-$seed.log"; fail "fsx seed $seed"; }
      tail -2 "$WORK/fsx-$seed.log"
    done
    log "fsx across a chunk boundary (64 MiB)"
    "$BIN/e2e_fsx" -N $((N / 4)) -S 7 -b $((64 << 20)) -l $((80 << 20)) "$MNT/fsx-chunk" >"$WORK/fsx-chunk.log" 2>&1 ||
      { tail -40 "$WORK/fsx-chunk.log"; fail "fsx chunk boundary"; }
    tail -2 "$WORK/fsx-chunk.log"
    ;;
  concurrency)
    log "concurrency"
    d="$MNT/concurrency"
    mkdir -p "$d"
    TESSERA_TEST_DIR="$d" "$BIN/e2e_concurrency_test" --gtest_brief=1 || fail concurrency
    ;;
  persist)
    log "remount persistence"
    "$BIN/e2e_persist" write "$MNT/persist" 42 || fail "persist write"
    unmount_volume
    mount_volume
    "$BIN/e2e_persist" verify "$MNT/persist" 42 || fail "persist verify after remount"
    ;;
  build)
    log "build a real project inside the mount (this repository's own sources)"
    SRC=$(cd "$(dirname "$0")/../.." && pwd)
    mkdir -p "$MNT/project"
    if git -C "$SRC" rev-parse HEAD >/dev/null 2>&1; then
      git -C "$SRC" archive HEAD | tar -x -C "$MNT/project"
    else
      tar -C "$SRC" --exclude='./build*' -cf - . | tar -x -C "$MNT/project"
    fi
    (cd "$MNT/project" && cmake -S . -B out -G Ninja -DCMAKE_BUILD_TYPE=Debug >/dev/null &&
      ninja -C out -j 2 tessera_kv tessera_object tessera_chunk >/dev/null) || fail "project build"
    unmount_volume
    mount_volume
    [ -f "$MNT/project/out/src/libtessera_kv.a" ] || fail "build output missing after remount"
    # Nothing to recompile: every object and timestamp survived the remount.
    rebuilt=$(cd "$MNT/project" && ninja -C out tessera_kv tessera_object tessera_chunk | grep -c "Building CXX" || true)
    [ "$rebuilt" = 0 ] || fail "build not up to date after remount ($rebuilt objects rebuilt)"
    ;;
  compact)
    N=10000
    [ "$QUICK" = 1 ] && N=2000
    log "fsx with background compaction forced often (--compact-threshold 3)"
    unmount_volume
    mount_volume --compact-threshold 3
    "$BIN/e2e_fsx" -N "$N" -S 11 -b 65536 -l $((4 << 20)) "$MNT/fsx-compact" >"$WORK/fsx-compact.log" 2>&1 ||
      { tail -40 "$WORK/fsx-compact.log"; fail "fsx with compaction"; }
    tail -1 "$WORK/fsx-compact.log"
    log "tessera compact: same bytes, fewer slices"
    unmount_volume
    mount_volume --compact-threshold 0
    python3 - "$MNT/patchy" <<'PY' || fail "writing the patchy file"
import os, random, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, os.urandom(300000), 0)
os.fsync(fd)
random.seed(3)
for _ in range(40):
    os.pwrite(fd, os.urandom(1000), random.randrange(0, 290000))
    os.fsync(fd)
os.close(fd)
PY
    sum_before=$(md5sum <"$MNT/patchy")
    slices_before=$("$TESSERA" info "$MNT/patchy" | grep -c "slice id")
    "$TESSERA" compact "$MNT/patchy" || fail "tessera compact"
    slices_after=$("$TESSERA" info "$MNT/patchy" | grep -c "slice id")
    [ "$slices_after" -lt "$slices_before" ] || fail "compact did not reduce slices ($slices_before -> $slices_after)"
    sleep 2  # replaced objects are deleted in the background
    echo 3 >/proc/sys/vm/drop_caches
    [ "$(md5sum <"$MNT/patchy")" = "$sum_before" ] || fail "content changed by compaction"
    unmount_volume
    mount_volume
    [ "$(md5sum <"$MNT/patchy")" = "$sum_before" ] || fail "content changed by compaction (after remount)"
    ;;
  twomounts)
    log "two mounts of one SQLite volume on this host"
    MNT2=$WORK/mnt2
    mkdir -p "$MNT2"
    "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log" --attr-cache 0 --entry-cache 0 --dir-entry-cache 0
    mkdir "$MNT/shared"
    head -c 3000000 /dev/urandom >"$WORK/blob"
    cp "$WORK/blob" "$MNT/shared/blob"
    cmp "$WORK/blob" "$MNT2/shared/blob" || fail "second mount sees different data after close"
    mv "$MNT2/shared/blob" "$MNT2/shared/blob2"
    sleep 1.2  # first mount's entry cache
    [ ! -e "$MNT/shared/blob" ] && cmp "$WORK/blob" "$MNT/shared/blob2" || fail "rename not seen by the other mount"
    for i in $(seq 1 100); do : >"$MNT/shared/a$i" & : >"$MNT2/shared/b$i" & wait; done
    [ "$(ls "$MNT2/shared" | grep -c '^[ab][0-9]')" = 200 ] || fail "concurrent creates from two mounts lost entries"
    wins=0
    for i in $(seq 1 50); do
      (set -o noclobber; echo 1 >"$MNT/shared/x$i") 2>/dev/null && wins=$((wins + 1)) &
      (set -o noclobber; echo 2 >"$MNT2/shared/x$i") 2>/dev/null &
      wait
    done
    [ "$(ls "$MNT/shared" | grep -c '^x')" = 50 ] || fail "O_EXCL creates from two mounts"
    for i in $(seq 1 50); do [ "$(wc -c <"$MNT2/shared/x$i")" = 2 ] || fail "O_EXCL: file x$i has two writers"; done
    "$TESSERA" umount "$MNT2"
    ;;
  crash)
    log "client crash: acknowledged data survives, open-unlinked files are reclaimed"
    head -c 5000000 /dev/urandom >"$WORK/acked"
    cp "$WORK/acked" "$MNT/acked"                       # close() returned
    head -c 2000000 /dev/urandom >"$MNT/doomed"
    "$TESSERA" info "$MNT/doomed" | awk '/object /{print $2}' >"$WORK/doomed.objects"
    [ -s "$WORK/doomed.objects" ] || fail "no objects listed for the doomed file"
    sleep 1000 <"$MNT/doomed" &
    holder=$!
    sleep 0.2
    rm "$MNT/doomed"
    sleep 1.5  # a background cleanup round passes: the objects must stay while the file is open
    while read -r key; do [ -f "$WORK/bucket/$key" ] || fail "open-unlinked file lost object $key early"; done <"$WORK/doomed.objects"
    pid=$(pgrep -f "tessera mount $META $MNT" | head -1)
    [ -n "$pid" ] || fail "cannot find the client process"
    kill -9 "$pid"
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    umount -l "$MNT" 2>/dev/null || true
    mount_volume
    cmp "$WORK/acked" "$MNT/acked" || fail "data acknowledged by close() lost in a client crash"
    left=0
    for _ in $(seq 1 50); do
      left=0
      while read -r key; do [ -f "$WORK/bucket/$key" ] && left=$((left + 1)); done <"$WORK/doomed.objects"
      [ "$left" -eq 0 ] && break
      sleep 0.2
    done
    [ "$left" -eq 0 ] || fail "$left object(s) of the open-unlinked file not reclaimed after the crash"
    ;;
  fsck)
    log "fsck after the workloads"
    unmount_volume
    "$TESSERA" fsck "$META" || fail fsck
    mount_volume
    ;;
  *) fail "unknown suite $suite" ;;
  esac
done
log "all suites passed: $SUITES"
