#!/usr/bin/env bash
# Mounts served over FUSE io_uring (`tessera mount --io-uring`, src/fuse/uring_loop.h).
# Usage: uring_suite.sh TESSERA_BINARY E2E_BIN_DIR
#  1. With the fuse module's enable_uring off, --io-uring fails with an error
#     that says how to turn it on, and leaves nothing mounted.
#  2. With it on: requests are served by the ring threads (the mount's
#     counter grows with the operations), one set of threads pinned to each
#     CPU, and files and names made through the rings read back through
#     another mount of the volume; 20 processes waiting for a lock on one CPU
#     do not stop the release of that lock (made on that CPU) nor a create
#     there: the queue grows; nor do 8 readers of .accesslog there; a request
#     made on a CPU while its entries all hold lock waits and the entries
#     added for them are not registered yet is served once they are
#     (TESSERA_FUSE_FAULTS=slow-ring-growth delays them 2 s); unmount ends
#     the client. Every access to a ring mount that could hang is bounded,
#     and a hang is reported (what the waiting processes and the client's
#     threads wait on) before the mount is aborted.
#  3. The POSIX, fsx, concurrency, persist and crash suites (run_e2e.sh) on
#     --io-uring mounts.
# Needs root; changes /sys/module/fuse/parameters/enable_uring and puts back
# the value it found. Exits 77 (ctest: skipped) on a kernel without FUSE
# io_uring (before 6.14, or built without CONFIG_FUSE_IO_URING).
set -euo pipefail
TESSERA=$(realpath "$1")
BIN=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
PARAM=/sys/module/fuse/parameters/enable_uring
if [ ! -e "$PARAM" ]; then
  echo "[uring] SKIPPED: this kernel has no FUSE io_uring ($PARAM missing)"
  exit 77
fi
WAS=$(cat "$PARAM")
WORK=$(mktemp -d /tmp/tessera-uring.XXXXXX)
MNT=$WORK/mnt MNT2=$WORK/mnt2
cleanup() {
  touch "$WORK/release3" 2>/dev/null || true  # (the slow-growth part's holder, if it failed there)
  for m in "$MNT" "$MNT2"; do
    if mountpoint -q "$m"; then "$TESSERA" umount "$m" -f || umount -l "$m" || true; fi
  done
  echo "$WAS" >"$PARAM" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '[uring %s] %s\n' "$(date +%T)" "$*"; }
fail() {
  echo "[uring] FAILED: $*" >&2
  tail -30 "$WORK/mount.log" >&2 2>/dev/null || true
  exit 1
}
# shellcheck source=tests/e2e/fuse_hang.sh
source "$HERE/fuse_hang.sh"
mkdir -p "$MNT" "$MNT2"
META="sqlite3://$WORK/meta.db"
"$TESSERA" format "$META" uringvol --bucket "$WORK/bucket" >/dev/null

log "enable_uring off: --io-uring is refused"
echo N >"$PARAM"
if out=$("$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" --io-uring 2>&1); then
  fail "mounted with --io-uring while the kernel's FUSE io_uring is off: $out"
fi
grep -q "enable_uring" <<<"$out" || fail "the error does not say how to turn it on: $out"
mountpoint -q "$MNT" && fail "a failed --io-uring mount left $MNT mounted"

log "enable_uring on: requests go through the rings"
echo Y >"$PARAM"
"$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" --io-uring
pid=$(pgrep -f "mount $META $MNT " | head -1)
[ -n "$pid" ] || fail "no client process for $MNT"
served() { awk '/^tessera_fuse_uring_requests_total/ {print $2}' "$MNT/.stats"; }
before=$(served)
mkdir "$MNT/d"
for i in $(seq 1 200); do echo "file $i" >"$MNT/d/f$i"; done
for i in $(seq 1 200); do mkdir "$MNT/d/sub$i"; done
after=$(served)
# Each file is at least a create, a write and a flush; each mkdir a mkdir.
[ $((after - before)) -ge 800 ] || fail "only $((after - before)) requests went through the rings for 200 files and 200 directories"
log "$((after - before)) requests through the rings for 200 files and 200 directories"
# One thread set per CPU, each thread bound to its CPU.
cpus=$(nproc --all)
rings=0
declare -A per_cpu=()
for t in /proc/"$pid"/task/*; do
  [ "$(cat "$t/comm")" = ts-fuse-ring ] || continue
  allowed=$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")
  [[ $allowed =~ ^[0-9]+$ ]] || fail "a ring thread may run on CPUs $allowed, not on its queue's CPU alone"
  per_cpu[$allowed]=$((${per_cpu[$allowed]:-0} + 1))
  rings=$((rings + 1))
done
[ "${#per_cpu[@]}" -eq "$cpus" ] || fail "ring threads on ${#per_cpu[@]} CPUs, expected one set on each of $cpus"
log "$rings ring threads on $cpus CPUs"
# What the rings wrote is what a plain mount of the volume reads.
"$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log"
for i in 1 77 200; do
  [ "$(cat "$MNT2/d/f$i")" = "file $i" ] || fail "f$i reads back wrong through a second mount"
done
[ "$(find "$MNT2/d" -mindepth 1 -maxdepth 1 -type d | wc -l)" -eq 200 ] || fail "the second mount does not see 200 directories"
# And a change made there shows through the ring mount (coherent caches: the
# invalidations are notifications, which go to /dev/fuse).
rm "$MNT2/d/f1"
for _ in $(seq 1 50); do [ -e "$MNT/d/f1" ] || break; sleep 0.1; done
[ -e "$MNT/d/f1" ] && fail "a removal through the second mount is not seen through the ring mount after 5 s"
"$TESSERA" umount "$MNT2"

# A read of .accesslog waits until other requests are logged: 8 readers (the
# most it allows) on CPU 0 must not take the entries (8 to start with) that
# other requests made there need.
log "8 readers of .accesslog on CPU 0: a file create there still answers"
readers=()
for _ in $(seq 1 8); do
  taskset -c 0 cat "$MNT/.accesslog" >/dev/null &
  readers+=($!)
done
sleep 0.5
# (A new file: requests the kernel cannot answer from its caches.)
bounded "$MNT" 10 taskset -c 0 touch "$MNT/d/probe1" ||
  fail "a file create on CPU 0 did not finish within 10 s while 8 .accesslog readers waited there (see above)"
kill "${readers[@]}" 2>/dev/null || true
rc=0
wait_or_abort "$MNT" 10 "${readers[@]}" || rc=$?
[ "$rc" -ne 2 ] || fail ".accesslog readers killed on CPU 0 did not end within 10 s"
log "the create answered; the readers ended when killed"

# Lock waiters hold their entries: 20 of them on CPU 0 (its queue starts with
# 8 entries) must not leave the request that releases the lock, or a create,
# without an entry. The queue grows instead.
log "20 lock waiters on one CPU: its queue grows, the lock is released, all of them get it"
bounded "$MNT" 10 touch "$MNT/lockf" || fail "creating lockf did not finish within 10 s (see above)"
taskset -c 0 flock "$MNT/lockf" sleep 1 &
holder=$!
sleep 0.3
waiters=()
for _ in $(seq 1 20); do
  taskset -c 0 flock "$MNT/lockf" true &
  waiters+=($!)
done
sleep 0.3
bounded "$MNT" 10 taskset -c 0 touch "$MNT/d/probe2" ||
  fail "a file create on CPU 0 did not finish within 10 s while 20 lock waiters were queued there (see above)"
rc=0
wait_or_abort "$MNT" 30 "$holder" "${waiters[@]}" || rc=$?
[ "$rc" -ne 2 ] || fail "lock waiters on CPU 0 still waiting 30 s after the holder's 1 s (deadlock: no entry for the release; see above)"
[ "$rc" -eq 0 ] || fail "a flock on the ring mount failed"
bounded "$MNT" 10 cp "$MNT/.stats" "$WORK/stats" || fail "reading .stats did not finish within 10 s (see above)"
added=$(awk '/^tessera_fuse_uring_entries_added_total/ {print $2}' "$WORK/stats")
[ "${added:-0}" -ge 1 ] || fail "CPU 0's queue did not grow for 20 lock waiters (entries added: ${added:-none})"
log "all 21 got the lock; $added entries added"

# A request made on a CPU whose entries all wait, while the entries added
# for those waits are not registered yet, waits in the kernel's queue, and
# registering an entry does not hand it over; the client then has the
# kernel queue a request of its own there (a kick), and answering that one
# does. The fault makes the added entries register 2 s late.
if [ "$cpus" -ge 2 ]; then
  log "a request made on CPU 0 while its 8 entries all hold lock waits, and those added for them register 2 s late, is served"
  TESSERA_FUSE_FAULTS=slow-ring-growth "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount3.log" --io-uring
  bounded "$MNT2" 10 touch "$MNT2/lock3" || fail "creating lock3 did not finish within 10 s (see above)"
  # shellcheck disable=SC2016 # (expanded by the inner sh)
  taskset -c 1 flock "$MNT2/lock3" sh -c 'touch "$1/held3"; while [ ! -e "$1/release3" ] && [ -d "$1" ]; do sleep 0.1; done' _ "$WORK" &
  holder=$!
  for _ in $(seq 1 100); do [ -e "$WORK/held3" ] && break; sleep 0.1; done
  [ -e "$WORK/held3" ] || fail "the holder on CPU 1 did not get lock3 within 10 s"
  waiters=()
  for _ in $(seq 1 8); do
    taskset -c 0 flock "$MNT2/lock3" true &
    waiters+=($!)
  done
  for w in "${waiters[@]}"; do waiting_in_fuse "$w" || fail "lock waiter $w on CPU 0 is not waiting in a FUSE request"; done
  t0=$(date +%s%N)
  taskset -c 0 cat "$MNT2/.stats" >"$WORK/stats3" &
  rc=0
  wait_or_abort "$MNT2" 15 $! || rc=$?
  [ "$rc" -ne 2 ] || fail "a read of .stats on CPU 0 was not served 15 s after it was made (the added entries registered after 2 s; see above)"
  [ "$rc" -eq 0 ] || fail "reading .stats on CPU 0 failed"
  held_ms=$((($(date +%s%N) - t0) / 1000000))
  # It waited for the added entries: else this did not test the case.
  [ "$held_ms" -ge 300 ] || fail "the read of .stats was served in $held_ms ms: it did not wait for an entry"
  kicks=$(awk '/^tessera_fuse_uring_kicks_total/ {print $2}' "$WORK/stats3")
  [ "${kicks:-0}" -ge 1 ] || fail "the read was served before any kick (kicks: ${kicks:-none})"
  log "served after $held_ms ms; kicks before its answer: $kicks"
  touch "$WORK/release3"
  rc=0
  wait_or_abort "$MNT2" 30 "$holder" "${waiters[@]}" || rc=$?
  [ "$rc" -ne 2 ] || fail "lock waiters on CPU 0 still waiting 30 s after the holder let go (see above)"
  [ "$rc" -eq 0 ] || fail "a flock on the slow-growth mount failed"
  "$TESSERA" umount "$MNT2" || fail "unmounting the slow-growth mount"
fi
"$TESSERA" umount "$MNT"
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the --io-uring client did not exit within 5 s of its unmount"
log "unmounted; the client exited"

log "POSIX, fsx, concurrency, persist and crash suites on --io-uring mounts"
TESSERA_E2E_MOUNT_OPTS=--io-uring bash "$HERE/run_e2e.sh" "$TESSERA" "$BIN" posix fsx concurrency persist crash fsck ||
  fail "run_e2e.sh on --io-uring mounts"
log "all passed"
