#!/usr/bin/env bash
# End-to-end suite against a real mount of a fresh volume (small block size so
# chunk/block boundaries are crossed often).
# Usage: run_e2e.sh TESSERA_BINARY E2E_BIN_DIR [SUITE...]
# Suites: posix fsx compact concurrency persist build twomounts crash fsck
#         faults sessions redis-restart writeback fullbucket gc trash stats rmr warmup quota clone observe coherent
#         (default: the first nine).
# The volume's engine and storage (the servers come from tests/tools/with-*.sh):
#   TESSERA_E2E_META=sqlite (default) | redis ($TESSERA_TEST_REDIS_URL) | postgres ($TESSERA_TEST_PG_URL)
#   TESSERA_E2E_STORAGE=file (default) | s3 ($TESSERA_TEST_S3_ENDPOINT, AWS_* credentials)
# TESSERA_E2E_QUICK=1 shortens the random workloads (sanitizer builds).
# TESSERA_E2E_MOUNT_OPTS adds options to the suites' main mount (e.g. --io-uring).
set -euo pipefail
TESSERA=$(realpath "$1")
BIN=$(realpath "$2")
shift 2
SUITES=${*:-posix fsx compact concurrency persist build twomounts crash fsck}
QUICK=${TESSERA_E2E_QUICK:-0}
ENGINE=${TESSERA_E2E_META:-sqlite}
STORAGE=${TESSERA_E2E_STORAGE:-file}
HERE=$(cd "$(dirname "$0")" && pwd)

WORK=$(mktemp -d /tmp/tessera-e2e.XXXXXX)
MNT=$WORK/mnt
case $ENGINE in
  sqlite) META="sqlite3://$WORK/meta.db" ;;
  redis) META=${TESSERA_TEST_REDIS_URL:?run under tests/tools/with-redis.sh} ;;
  postgres) META=${TESSERA_TEST_PG_URL:?run under tests/tools/with-postgres.sh} ;;
  *) echo "unknown TESSERA_E2E_META=$ENGINE" >&2; exit 2 ;;
esac
case $STORAGE in
  file) STORE_ARGS=(--bucket "$WORK/bucket") ;;
  s3)
    S3_BUCKET="e2e-$(basename "$WORK" | tr 'A-Z.' 'a-z-')"
    STORE_ARGS=(--storage s3 --bucket "${TESSERA_TEST_S3_ENDPOINT:?run under tests/tools/with-s3.sh}/$S3_BUCKET")
    ;;
  *) echo "unknown TESSERA_E2E_STORAGE=$STORAGE" >&2; exit 2 ;;
esac
log() { printf '[e2e %s] %s\n' "$(date +%T)" "$*"; }
# shellcheck source=tests/e2e/fuse_hang.sh
source "$HERE/fuse_hang.sh"
log "engine $ENGINE, storage $STORAGE"

# Does object KEY exist in the volume's bucket?
obj_exists() {
  if [ "$STORAGE" = file ]; then
    [ -f "$WORK/bucket/$1" ]
  else
    /usr/bin/python3 - "$TESSERA_TEST_S3_ENDPOINT" "$S3_BUCKET" "$1" <<'PY'
import sys, boto3, botocore
s3 = boto3.client("s3", endpoint_url=sys.argv[1])
try:
    s3.head_object(Bucket=sys.argv[2], Key=sys.argv[3])
except botocore.exceptions.ClientError:
    sys.exit(1)
PY
  fi
}
mkdir -p "$MNT"
chmod 755 "$WORK"

# Background processes of a suite that hold files open in a mount: killed
# first on every exit, so that a failed check does not leave one keeping the
# mount (and the test, until its timeout) alive.
HOLDERS=''
holds() { HOLDERS="$HOLDERS $1"; }
cleanup() {
  local p
  for p in $HOLDERS; do kill -9 "$p" 2>/dev/null || true; done
  for m in "$MNT" "$WORK/mnt2" "$WORK/fullmnt"; do
    if mountpoint -q "$m"; then "$TESSERA" umount "$m" -f || umount -l "$m" || true; fi
  done
  if mountpoint -q "$WORK/smallfs" 2>/dev/null; then umount -l "$WORK/smallfs" || true; fi
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

# alarmed_lock_waiter FILE: waits for a POSIX write lock on FILE, held by
# another process, with a 1 s alarm; succeeds if the alarm ends the wait
# within 3 s. (The SIGALRM handler raises, so Python does not retry it.)
alarmed_lock_waiter() {
  python3 -c 'import fcntl, signal, sys, time
class Alarm(Exception): pass
def on_alarm(sig, frame): raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
f = open(sys.argv[1], "r+"); signal.alarm(1); t = time.time()
try:
    fcntl.lockf(f, fcntl.LOCK_EX)
    sys.exit("got the lock after %.1f s: the signal did not interrupt the wait" % (time.time() - t))
except Alarm:
    if time.time() - t > 3: sys.exit("interrupted only after %.1f s" % (time.time() - t))' "$1"
}
# How many objects listed in FILE still exist after waiting up to SECONDS
# (default 10) for background deletion.
objects_left_after_wait() {
  local left=0
  for _ in $(seq 1 $((${2:-10} * 5))); do
    left=0
    while read -r key; do if obj_exists "$key"; then left=$((left + 1)); fi; done <"$1"
    [ "$left" -eq 0 ] && break
    sleep 0.2
  done
  echo "$left"
}
# A fresh pids cgroup (v1 hierarchy, or v2 with the pids controller), printed;
# fails if there is none this user can make.
pids_cgroup() {
  local base d
  for base in /sys/fs/cgroup/pids /sys/fs/cgroup; do
    [ -f "$base/cgroup.procs" ] || continue
    if [ "$base" = /sys/fs/cgroup ]; then grep -qw pids "$base/cgroup.subtree_control" 2>/dev/null || continue; fi
    d=$base/tessera-e2e-$$
    if mkdir "$d" 2>/dev/null; then
      # A subshell joins it and exits: processes can be put there.
      if [ -f "$d/pids.max" ] && (echo "$BASHPID" >"$d/cgroup.procs") 2>/dev/null; then
        echo "$d"
        return 0
      fi
      rmdir "$d" 2>/dev/null || true
    fi
  done
  return 1
}
# The POSIX suites test extended attributes, which are off by default.
# TESSERA_E2E_MOUNT_OPTS: more options for the suites' mounts (e.g. --io-uring).
mount_volume() {
  # shellcheck disable=SC2086  # a list of options
  "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" --enable-xattr ${TESSERA_E2E_MOUNT_OPTS:-} "$@"
}
unmount_volume() { "$TESSERA" umount "$MNT"; }
# kill_client: SIGKILLs the client serving $MNT and detaches its dead mount.
kill_client() {
  local pid
  pid=$(pgrep -f "tessera mount .* $MNT -d" | head -1)
  [ -n "$pid" ] || fail "cannot find the client process"
  kill -9 "$pid"
  umount -l "$MNT" 2>/dev/null || true
}
fail() {
  echo "[e2e] FAILED: $*" >&2
  echo "[e2e] ---- mount log (tail)" >&2
  tail -50 "$WORK/mount.log" >&2 || true
  exit 1
}

# The trash is on (the default) when every suite is one that must pass with
# it: POSIX (where POSIX and the trash conflict, POSIX wins), fsx,
# concurrency and the trash suite itself. Suites that check that removed
# data is reclaimed at once run without it.
TRASH_DAYS=1
for suite in $SUITES; do
  case $suite in posix | fsx | concurrency | fsck | trash) ;; *) TRASH_DAYS=0 ;; esac
done
log "trash-days $TRASH_DAYS"
"$TESSERA" format "$META" e2e-vol "${STORE_ARGS[@]}" --block-size 64 --trash-days "$TRASH_DAYS" >/dev/null
if [ "$STORAGE" = s3 ]; then
  log "mount with a wrong secret key fails at once, in the foreground, without printing it"
  out=$(AWS_SECRET_ACCESS_KEY=wrong-secret-e2e timeout 120 "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" 2>&1) &&
    { echo "$out"; unmount_volume; echo "[e2e] FAILED: mount with a wrong secret succeeded" >&2; exit 1; }
  case $out in *"not usable"*) ;; *) echo "[e2e] FAILED: unclear error: $out" >&2; exit 1 ;; esac
  case $out in *wrong-secret-e2e*) echo "[e2e] FAILED: the secret was printed: $out" >&2; exit 1 ;; esac
  ! mountpoint -q "$MNT" || { echo "[e2e] FAILED: mounted anyway" >&2; exit 1; }
fi
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
    log "without --enable-xattr: xattrs fail with ENOTSUP, data and names unaffected"
    setfattr_py() { python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.k", b"v")' "$1" 2>&1; }
    echo data >"$MNT/xattr-probe" && setfattr_py "$MNT/xattr-probe" >/dev/null || fail "setxattr with --enable-xattr"
    unmount_volume
    "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log"
    out=$(setfattr_py "$MNT/xattr-probe" || true)
    case $out in *"Operation not supported"*) ;; *) fail "setxattr without --enable-xattr: '$out' (want ENOTSUP)" ;; esac
    [ "$(cat "$MNT/xattr-probe")" = data ] || fail "file unreadable without --enable-xattr"
    unmount_volume
    mount_volume
    [ "$(python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.k").decode())' "$MNT/xattr-probe")" = v ] ||
      fail "xattr lost across a mount without --enable-xattr"
    rm -f "$MNT/xattr-probe"
    ;;
  fsx)
    N=15000
    [ "$QUICK" = 1 ] && N=3000
    # Over the S3 test server each flush is a PUT to a Python server (~14 ms
    # per fsx op): the S3 data path gets 1,500 ops per run, the long runs are
    # e2e_fsx on local storage and scripts/campaigns/fsx_seeds.sh;
    # scripts/campaigns/object_faults.sh runs fsx on S3 for 10 minutes.
    [ "$STORAGE" = s3 ] && N=1500
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
    log "fsx with O_DIRECT and kernel AIO interleaved with buffered I/O and mmap"
    "$BIN/e2e_fsx" -N "$N" -S 3 -Z -A -b 65536 -l $((8 << 20)) "$MNT/fsx-aio" >"$WORK/fsx-aio.log" 2>&1 ||
      { tail -40 "$WORK/fsx-aio.log"; fail "fsx O_DIRECT + AIO"; }
    tail -2 "$WORK/fsx-aio.log"
    ;;
  concurrency)
    log "concurrency"
    d="$MNT/concurrency"
    mkdir -p "$d"
    TESSERA_TEST_DIR="$d" "$BIN/e2e_concurrency_test" --gtest_brief=1 || fail concurrency
    log "a signal interrupts a process waiting for a POSIX lock (FUSE INTERRUPT)"
    echo x >"$d/intr"
    rm -f "$WORK/intr-held" "$WORK/intr-release"
    # The holder keeps the lock until the waiter is done (a fixed time was
    # not always enough on a loaded machine over PostgreSQL), at most 60 s.
    python3 -c 'import fcntl, os, sys, time
f = open(sys.argv[1], "r+"); fcntl.lockf(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close()
t = time.time()
while not os.path.exists(sys.argv[3]) and time.time() - t < 60: time.sleep(0.1)' \
      "$d/intr" "$WORK/intr-held" "$WORK/intr-release" &
    holder=$!
    for _ in $(seq 1 100); do [ -e "$WORK/intr-held" ] && break; sleep 0.1; done
    [ -e "$WORK/intr-held" ] || fail "the POSIX lock holder did not get its lock within 10 s"
    alarmed_lock_waiter "$d/intr" &
    waiter=$!
    rc=0
    wait_or_abort "$MNT" 30 "$waiter" || rc=$?
    touch "$WORK/intr-release"
    [ "$rc" -ne 2 ] || fail "a lock waiter sent SIGALRM still waits 30 s later"
    [ "$rc" -eq 0 ] || fail "a lock wait was not interrupted by a signal (see above)"
    wait "$holder" || fail "the POSIX lock holder failed"
    # More waiters than the 32 workers of the request loop: lock waiters must
    # not count against that limit, or the holder's unlock finds no worker.
    log "40 lock waiters hold FUSE workers beyond the 32 of the loop; then SIGTERM ends the mount"
    MNT2=$WORK/mnt2
    mkdir -p "$MNT2"
    "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log"
    pid=$(pgrep -f "tessera mount .* $MNT2 -d" | head -1)
    [ -n "$pid" ] || fail "cannot find mount 2's process"
    : >"$MNT2/lock"
    rm -f "$WORK/release40"
    # The holder keeps the lock until every waiter is seen blocked (at most
    # 60 s): fixed times were too short with seven server suites side by side.
    # shellcheck disable=SC2016  # expanded by the inner shell
    flock "$MNT2/lock" sh -c 'for _ in $(seq 1 600); do [ -e "$1" ] && exit 0; sleep 0.1; done' sh "$WORK/release40" &
    holder=$!
    sleep 0.5
    waiters=()
    for _ in $(seq 1 40); do
      flock "$MNT2/lock" true &
      waiters+=($!)
    done
    workers=0
    for _ in $(seq 1 100); do
      workers=$(ps -L -o comm= -p "$pid" | grep -c '^ts-fuse$' || true)
      [ "$workers" -gt 40 ] && break
      sleep 0.2
    done
    touch "$WORK/release40"
    rc=0
    wait_or_abort "$MNT2" 60 "$holder" "${waiters[@]}" || rc=$?
    [ "$rc" -ne 2 ] || fail "lock waiters still blocked 60 s after the holder let go (the unlock found no FUSE worker)"
    [ "$rc" -eq 0 ] || fail "a lock waiter or the holder failed"
    log "$workers FUSE workers while 40 lock waiters blocked"
    [ "$workers" -gt 40 ] || fail "only $workers FUSE workers for 40 blocked lock requests"
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "mount 2 still runs 10 s after SIGTERM"
    mountpoint -q "$MNT2" && fail "mount 2 still mounted after SIGTERM"
    # A client told to stop, or whose connection is aborted, while requests
    # still wait for a lock or for .accesslog lines: the waits end with the
    # session (they held the client's exit for ever before).
    for how in SIGTERM abort; do
      log "a client whose lock waiter and .accesslog reader still wait exits on $how"
      "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log" ${TESSERA_E2E_MOUNT_OPTS:-}
      pid=$(pgrep -f "tessera mount .* $MNT2 -d" | head -1)
      [ -n "$pid" ] || fail "cannot find mount 2's process"
      rm -f "$WORK/held-$how" "$WORK/release-$how"
      : >"$MNT2/lock-$how"
      # shellcheck disable=SC2016 # (expanded by the inner sh)
      flock "$MNT2/lock-$how" sh -c 'touch "$1"; while [ ! -e "$2" ] && [ -e "$1" ]; do sleep 0.1; done' _ \
        "$WORK/held-$how" "$WORK/release-$how" &
      holder=$!
      for _ in $(seq 1 100); do [ -e "$WORK/held-$how" ] && break; sleep 0.1; done
      [ -e "$WORK/held-$how" ] || fail "the holder did not get its lock within 10 s"
      flock "$MNT2/lock-$how" true 2>"$WORK/waiter-$how.err" &
      waiter=$!
      cat "$MNT2/.accesslog" >/dev/null 2>&1 &
      reader=$!
      waiting_in_fuse "$waiter" || fail "the lock waiter is not waiting in a FUSE request"
      waiting_in_fuse "$reader" || fail "the .accesslog reader is not waiting in a FUSE request"
      if [ "$how" = SIGTERM ]; then kill -TERM "$pid"; else abort_fuse "$MNT2"; fi
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then
        hang_report "$MNT2" "$waiter" "$reader"
        kill -KILL "$pid"
        fail "mount 2's client still runs 10 s after $how, with a lock waiter and a reader waiting"
      fi
      touch "$WORK/release-$how"
      rc=0
      wait_or_abort "$MNT2" 10 "$holder" "$waiter" "$reader" || rc=$?
      [ "$rc" -ne 2 ] || fail "the holder, waiter or reader still there 10 s after the client exited"
      # Not the kernel's restart code (errno 512), which EINTR became.
      grep -qE "Transport endpoint is not connected|Software caused connection abort" "$WORK/waiter-$how.err" ||
        fail "the lock waiter's error after $how: $(cat "$WORK/waiter-$how.err")"
      # (After the abort the mount can outlive its client, dead: mountpoint(1)
      # cannot stat it, /proc/self/mountinfo still lists it.)
      if fuse_conn "$MNT2" >/dev/null; then umount -l "$MNT2"; fi
    done
    log "a mount that may start no more threads (a pids cgroup at its count) still answers every request"
    if cg=$(pids_cgroup); then
      bash -c 'echo $$ >"$1/cgroup.procs" && exec "$2" mount "$3" "$4" -d --log "$5"' \
        _ "$cg" "$TESSERA" "$META" "$MNT2" "$WORK/mount3.log" || fail "mount in a pids cgroup"
      cat "$cg/pids.current" >"$cg/pids.max"
      head -c 4000000 /dev/urandom >"$WORK/limited.blob"
      writers=()
      for i in $(seq 1 16); do
        (cp "$WORK/limited.blob" "$MNT2/limited$i" && cmp "$WORK/limited.blob" "$MNT2/limited$i") &
        writers+=($!)
      done
      for w in "${writers[@]}"; do wait "$w" || { echo max >"$cg/pids.max"; fail "a copy through the thread-limited mount failed or differs"; }; done
      failed=$(grep '^tessera_fuse_worker_start_failures_total' "$MNT2/.stats" | awk '{print $2}')
      warned=$(grep -c "cannot start another request worker" "$WORK/mount3.log" || true)
      echo max >"$cg/pids.max"
      "$TESSERA" umount "$MNT2" || fail "unmounting the thread-limited mount"
      for _ in $(seq 1 50); do [ "$(cat "$cg/pids.current")" -eq 0 ] && break; sleep 0.1; done
      rmdir "$cg" || true
      log "$failed FUSE workers could not start; $warned warning(s) in the log"
      [ "${failed:-0}" -gt 0 ] || fail "no worker start failed under the pids limit (nothing tested)"
      [ "$warned" -ge 1 ] && [ "$warned" -le 2 ] || fail "$warned warnings for $failed failures: not rate-limited"
    else
      log "SKIPPED: no writable pids cgroup on this machine"
    fi
    # The kernel does not always send FUSE_INTERRUPT (over io_uring: a signal
    # between a request's queueing and its sending; src/fuse/long_wait.h).
    # With every interrupt dropped, waits still end when their caller has a
    # signal: a killed reader of .accesslog on an idle mount, then a killed
    # flock waiter, then a POSIX lock waiter whose SIGALRM handler raises.
    # One at a time: the end of one (its requests are logged) would wake a
    # reader with lines to read.
    log "no FUSE_INTERRUPT at all: killed and signalled waiters still end"
    # shellcheck disable=SC2086  # a list of options
    TESSERA_FUSE_FAULTS=drop-interrupts "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount4.log" \
      ${TESSERA_E2E_MOUNT_OPTS:-} || fail "mount with TESSERA_FUSE_FAULTS=drop-interrupts"
    grep -q "injecting faults (drop-interrupts" "$WORK/mount4.log" || fail "the drop-interrupts fault is not on"
    : >"$MNT2/intr2"
    rm -f "$WORK/held"
    python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "r+"); fcntl.flock(f, fcntl.LOCK_EX); fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").close(); time.sleep(60)' "$MNT2/intr2" "$WORK/held" &
    holder=$!
    holds "$holder"
    for _ in $(seq 1 100); do [ -e "$WORK/held" ] && break; sleep 0.1; done
    [ -e "$WORK/held" ] || fail "the lock holder did not get its locks"
    # killed_waiter_ends PID WHAT: PID, waiting in a FUSE request, ends
    # within 5 s of SIGTERM.
    killed_waiter_ends() {
      waiting_in_fuse "$1" || fail "the $2 is not waiting in a FUSE request"
      kill "$1"
      rc=0
      wait_or_abort "$MNT2" 5 "$1" || rc=$?
      [ "$rc" -ne 2 ] || fail "a killed $2 still waits 5 s later with no FUSE_INTERRUPT"
    }
    cat "$MNT2/.accesslog" >/dev/null &
    killed_waiter_ends $! ".accesslog reader"
    flock "$MNT2/intr2" true &
    killed_waiter_ends $! "flock waiter"
    rc=0
    alarmed_lock_waiter "$MNT2/intr2" &
    alarmed=$!
    wait_or_abort "$MNT2" 10 "$alarmed" || rc=$?
    [ "$rc" -ne 2 ] || fail "a POSIX lock waiter sent SIGALRM still waits 10 s later with no FUSE_INTERRUPT"
    [ "$rc" -eq 0 ] || fail "a POSIX lock wait was not interrupted by a signal with no FUSE_INTERRUPT (see above)"
    kill "$holder"
    wait "$holder" 2>/dev/null || true
    "$TESSERA" umount "$MNT2" || fail "unmounting the drop-interrupts mount"
    ;;
  faults)
    N=6000
    [ "$QUICK" = 1 ] && N=2000
    log "fsx through a store failing 5% of requests (+1% lost replies, +1% dropped connections)"
    unmount_volume
    TESSERA_OBJECT_FAULTS="seed=17,error=0.05,lost_reply=0.01,drop=0.01" mount_volume --compact-threshold 8
    "$BIN/e2e_fsx" -N "$N" -S 21 -b 65536 -l $((4 << 20)) "$MNT/fsx-faults" >"$WORK/fsx-faults.log" 2>&1 ||
      { tail -40 "$WORK/fsx-faults.log"; fail "fsx over a faulty store"; }
    tail -2 "$WORK/fsx-faults.log" | head -1
    grep -q "injecting faults" "$WORK/mount.log" || fail "the mount did not inject faults"
    retried=$(grep -c "retrying in" "$WORK/mount.log" || true)
    log "$retried object requests failed and were retried"
    [ "$retried" -gt 20 ] || fail "too few injected faults to mean anything ($retried)"
    head -c 20000000 /dev/urandom >"$WORK/faults.blob"
    cp "$WORK/faults.blob" "$MNT/faults.blob" || fail "writing a big file over the faulty store"
    echo 3 >/proc/sys/vm/drop_caches
    cmp "$WORK/faults.blob" "$MNT/faults.blob" || fail "big file read back wrong over the faulty store"
    unmount_volume
    mount_volume
    cmp "$WORK/faults.blob" "$MNT/faults.blob" || fail "big file differs after remounting without faults"
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
      ninja -C out -j 2 tessera_object >/dev/null) || fail "project build"  # and tessera_common: 19 sources
    unmount_volume
    mount_volume
    [ -f "$MNT/project/out/src/libtessera_object.a" ] || fail "build output missing after remount"
    # Nothing to recompile: every object and timestamp survived the remount.
    rebuilt=$(cd "$MNT/project" && ninja -C out tessera_object | grep -c "Building CXX" || true)
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
    if [ "$STORAGE" = file ]; then
      log "compact: a file kept open and overwritten in place 24 times leaves no pile of replaced objects"
      bucket_mib() { { du -sm "$WORK/bucket" 2>/dev/null || true; } | cut -f1; }  # du races deletions
      base=$(bucket_mib)
      python3 - "$MNT/ring" "$WORK/ring-pass" <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
for p in range(24):  # 24 passes of 16 MiB in 1 MiB writes: 384 MiB written, 16 MiB live
    for i in range(16):
        os.pwrite(fd, bytes([p]) * (1 << 20), i << 20)
    with open(sys.argv[2] + ".tmp", "w") as f:  # renamed: never seen empty
        f.write(str(p + 1))
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(1000)
PY
      ring=$!
      holds "$ring"
      # A sanitizer build on a loaded machine takes tens of seconds for the
      # 384 MiB: what must not happen is a pass that never ends.
      passes=0 stalled=0
      while [ "$passes" -lt 24 ] && [ "$stalled" -lt 300 ]; do
        sleep 0.1
        now=$(cat "$WORK/ring-pass" 2>/dev/null || true)
        [[ $now =~ ^[0-9]+$ ]] || now=$passes  # not written yet
        if [ "$now" = "$passes" ]; then stalled=$((stalled + 1)); else passes=$now stalled=0; fi
      done
      [ "$passes" = 24 ] || fail "the overwriting writer made no progress for 30 s (after $passes of 24 passes)"
      # Uploads of the last passes may still be running (64 KiB blocks, a
      # busy disk), then their commit (the background loop commits what a
      # stream froze while its previous commit ran) and a deletion round.
      for _ in $(seq 1 60); do
        held=$(($(bucket_mib) - base))
        [ "$held" -le 160 ] && break
        sleep 0.25
      done
      kill "$ring"; wait "$ring" 2>/dev/null || true
      # Uncommitted (64 MiB) + one commit in flight (64 MiB) + the file: the
      # 384 MiB written would all be there without background commits.
      [ "$held" -le 160 ] || fail "$held MiB in the bucket while a 16 MiB file is held open (384 MiB written)"
      for _ in $(seq 1 50); do [ $(($(bucket_mib) - base)) -le 20 ] && break; sleep 0.2; done
      closed=$(($(bucket_mib) - base))
      [ "$closed" -le 20 ] || fail "$closed MiB in the bucket for a 16 MiB file after it was closed"
      [ "$(head -c 1 "$MNT/ring" | od -An -tu1 | tr -d ' ')" = 23 ] || fail "the last pass is not what the file holds"
      log "compact: bucket +$held MiB while open, +$closed MiB after close"
      rm -f "$MNT/ring"
    fi
    ;;
  twomounts)
    log "two mounts of one volume (two client processes; kernel caches on, default timeouts)"
    MNT2=$WORK/mnt2
    mkdir -p "$MNT2"
    "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log"
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
    # Close-to-open with kernel caches on: the reader has the old version
    # cached; its next open sees the new one completely, grown or shrunk.
    echo "version one" >"$MNT/shared/c2o"
    cat "$MNT2/shared/c2o" >/dev/null
    for size in 1234567 1000 70000; do
      head -c "$size" /dev/urandom >"$WORK/c2o"
      cp "$WORK/c2o" "$MNT/shared/c2o"
      cmp "$WORK/c2o" "$MNT2/shared/c2o" || fail "close-to-open: mount 2 read a stale version ($size bytes)"
    done
    sleep 1.2  # attribute cache timeout
    [ "$(stat -c %s.%Y "$MNT/shared/c2o")" = "$(stat -c %s.%Y "$MNT2/shared/c2o")" ] || fail "size/mtime differ"
    rm "$MNT/shared/c2o"
    sleep 1.2  # entry cache timeout
    [ ! -e "$MNT2/shared/c2o" ] || fail "unlink not seen by the other mount"
    # Locks exclude across clients: BSD flock and POSIX record locks.
    : >"$MNT/shared/lockf"
    flock "$MNT/shared/lockf" sleep 3 &
    locker=$!
    sleep 0.5
    flock -n "$MNT2/shared/lockf" true && fail "flock: both mounts got the exclusive lock"
    wait "$locker"
    # The kernel sends the unlock after flock(1) has exited (FUSE release).
    for _ in $(seq 1 20); do flock -n "$MNT2/shared/lockf" true && break; sleep 0.1; done
    flock -n "$MNT2/shared/lockf" true || fail "flock: not released"
    python3 - "$MNT/shared/lockf" "$MNT2/shared/lockf" <<'PY' || fail "POSIX locks across mounts"
import fcntl, os, sys, time
a = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(a, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)      # bytes 0-99 on mount 1
pid = os.fork()
if pid == 0:                                               # another process, mount 2
    b = os.open(sys.argv[2], os.O_RDWR)
    try:
        fcntl.lockf(b, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 50)
        os._exit(1)                                        # overlapping range granted: wrong
    except OSError:
        pass
    fcntl.lockf(b, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 200) # disjoint range: fine
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
PY
    "$TESSERA" umount "$MNT2"
    ;;
  sessions)
    log "a client killed with SIGKILL: the next mount cleans its session, locks and open-unlinked files"
    MNT2=$WORK/mnt2
    mkdir -p "$MNT2" "$MNT/s"
    "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log"
    : >"$MNT/s/held"
    head -c 1000000 /dev/urandom >"$MNT/s/gone"
    "$TESSERA" info "$MNT/s/gone" | awk '/object /{print $2}' >"$WORK/gone.objects"
    [ -s "$WORK/gone.objects" ] || fail "no objects listed for the open-unlinked file"
    python3 - "$MNT2/s" "$WORK/holding" <<'PY' &
import fcntl, os, sys, time
held = os.open(sys.argv[1] + "/held", os.O_RDWR)
fcntl.flock(held, fcntl.LOCK_EX)
gone = os.open(sys.argv[1] + "/gone", os.O_RDONLY)
os.unlink(sys.argv[1] + "/gone")
open(sys.argv[2], "w").close()
time.sleep(1000)
PY
    holder=$!
    holds "$holder"
    for _ in $(seq 1 100); do [ -f "$WORK/holding" ] && break; sleep 0.1; done
    [ -f "$WORK/holding" ] || fail "lock holder did not start"
    [ "$("$TESSERA" status "$META" | grep -c "$MNT2")" -ge 1 ] || fail "status does not list mount 2's session"
    flock -n "$MNT/s/held" true && fail "mount 2's lock does not exclude mount 1"
    pid=$(pgrep -f "tessera mount .* $MNT2 -d" | head -1)
    [ -n "$pid" ] || fail "cannot find mount 2's process"
    kill -9 "$pid"
    kill -9 "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    umount -l "$MNT2" 2>/dev/null || true
    # (Mount 1 may already be cleaning the dead session: its periodic check
    # finds a session of this host whose process is gone.)
    while read -r key; do obj_exists "$key" || fail "open-unlinked file lost object $key before cleanup"; done <"$WORK/gone.objects"
    # The next mount of the volume finds the dead session (same host, process gone) and cleans it.
    "$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log"
    flock -n "$MNT/s/held" true || fail "the dead client's lock was not released"
    left=$(objects_left_after_wait "$WORK/gone.objects")
    [ "$left" -eq 0 ] || fail "$left object(s) of the dead client's open-unlinked file not reclaimed"
    [ "$("$TESSERA" status "$META" | grep -c "\"ProcessID\": $pid,")" = 0 ] || fail "the dead session is still listed"
    "$TESSERA" umount "$MNT2"
    ;;
  redis-restart)
    log "redis-server restarts (AOF) during a workload: nothing acknowledged is lost"
    [ "$ENGINE" = redis ] || fail "redis-restart needs TESSERA_E2E_META=redis"
    mkdir -p "$MNT/rr"
    : >"$WORK/acked.list"
    (
      for i in $(seq 1 400); do
        head -c $((RANDOM * 8)) /dev/urandom >"$WORK/rr.$i"
        if cp "$WORK/rr.$i" "$MNT/rr/f$i" 2>/dev/null; then echo "$i" >>"$WORK/acked.list"; fi
      done
    ) &
    writer=$!
    sleep 1
    bash "$HERE/../tools/redis-server.sh" restart "$TESSERA_TEST_REDIS_DIR" || fail "redis restart"
    sleep 1
    bash "$HERE/../tools/redis-server.sh" restart "$TESSERA_TEST_REDIS_DIR" || fail "redis restart"
    wait "$writer"
    acked=$(wc -l <"$WORK/acked.list")
    log "$acked of 400 files acknowledged across two restarts"
    [ "$acked" -ge 300 ] || fail "too few writes succeeded around the restarts ($acked)"
    unmount_volume
    mount_volume
    while read -r i; do cmp "$WORK/rr.$i" "$MNT/rr/f$i" || fail "acknowledged file f$i lost or corrupt"; done <"$WORK/acked.list"
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
    holds "$holder"
    sleep 0.2
    rm "$MNT/doomed"
    sleep 1.5  # a background cleanup round passes: the objects must stay while the file is open
    while read -r key; do obj_exists "$key" || fail "open-unlinked file lost object $key early"; done <"$WORK/doomed.objects"
    kill_client
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    mount_volume
    cmp "$WORK/acked" "$MNT/acked" || fail "data acknowledged by close() lost in a client crash"
    left=$(objects_left_after_wait "$WORK/doomed.objects")
    [ "$left" -eq 0 ] || fail "$left object(s) of the open-unlinked file not reclaimed after the crash"
    # sqlite3 answers metadata changes before committing them (other engines
    # ignore the option): close and fsync must commit, whatever the delay,
    # and every change answered before the kill must survive it (the redo
    # journal, replayed by the next process that opens the database). Each
    # case ends with the call under test, then the client is killed at once:
    # any later request that reads would commit too.
    log "client crashes under a 1 s commit delay: what close, fsync and every answered change made survives"
    crash_client() {
      kill_client
      mount_volume --commit-delay 1000
    }
    unmount_volume
    mount_volume --commit-delay 1000
    python3 - "$MNT" <<'PY' || fail "mkdir and fsync of its parent"
import os, sys
parent = os.open(sys.argv[1], os.O_RDONLY)  # opened first: nothing after the mkdir reads
os.mkdir(sys.argv[1] + "/synced-dir")
os.fsync(parent)
PY
    crash_client
    [ -d "$MNT/synced-dir" ] || fail "a directory whose parent was fsynced was lost in a client crash (1 s commit delay)"
    : >"$MNT/closed-empty"
    crash_client
    [ -f "$MNT/closed-empty" ] || fail "an empty file created and closed was lost in a client crash (1 s commit delay)"
    head -c 100000 /dev/urandom >"$WORK/acked2"
    cp "$WORK/acked2" "$MNT/acked2"
    crash_client
    cmp "$WORK/acked2" "$MNT/acked2" || fail "a file written and closed was lost in a client crash (1 s commit delay)"
    # Neither closed nor synced, each the last request before the kill:
    # only the redo journal keeps these.
    mkdir "$MNT/answered-dir"
    crash_client
    [ -d "$MNT/answered-dir" ] || fail "a mkdir answered under a 1 s commit delay was lost in a client crash"
    mv "$MNT/closed-empty" "$MNT/renamed-empty"
    crash_client
    [ -f "$MNT/renamed-empty" ] && [ ! -e "$MNT/closed-empty" ] ||
      fail "a rename answered under a 1 s commit delay was lost in a client crash"
    rm "$MNT/acked"
    crash_client
    [ ! -e "$MNT/acked" ] || fail "an unlink answered under a 1 s commit delay was undone by a client crash"
    ln -s target "$MNT/answered-link"
    crash_client
    [ "$(readlink "$MNT/answered-link")" = target ] ||
      fail "a symlink answered under a 1 s commit delay was lost in a client crash"
    unmount_volume
    mount_volume
    ;;
  writeback)
    . "$(dirname "$0")/writeback_suite.sh"  # --writeback: staging, crash, recovery, umount --flush
    ;;
  fullbucket)
    . "$(dirname "$0")/fullbucket_suite.sh"  # failed writes free their blocks and never read back
    ;;
  trash)
    . "$(dirname "$0")/trash_suite.sh"  # rm -rf, restore --put-back, purge after trash-days
    ;;
  warmup)
    . "$(dirname "$0")/warmup_suite.sh"  # tessera warmup: evict, load, check; a cold read without the store
    ;;
  rmr)
    . "$(dirname "$0")/rmr_suite.sh"  # tessera rmr through the control channel, trash off and on
    ;;
  clone)
    . "$(dirname "$0")/clone_suite.sh"  # tessera clone: no data copied, copies independent, reclaimed with the last
    ;;
  quota)
    . "$(dirname "$0")/quota_suite.sh"  # directory and user quotas: EDQUOT, df, nested, two mounts, check --repair
    ;;
  observe)
    . "$(dirname "$0")/observe_suite.sh"  # metrics, Prometheus, .accesslog/.stats/.config, stats/profile/debug
    ;;
  stats)
    . "$(dirname "$0")/stats_suite.sh"  # summary / info -r agree with find; crash, fsck --repair
    ;;
  coherent)
    . "$(dirname "$0")/coherent_suite.sh"  # two mounts: changes invalidate long kernel caches; a cut watch recovers
    ;;
  gc)
    . "$(dirname "$0")/gc_suite.sh"  # tessera gc finds leaked objects, deletes only old ones, never referenced ones
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
