#!/usr/bin/env bash
# Long waits on FUSE io_uring mounts: nothing may hang.
#
# A request in a long wait (a blocking flock/fcntl lock, a read of
# .accesslog) holds its CPU's io_uring entry; the client adds entries so that
# the request that ends the waits, and every other request made on that CPU,
# still gets one (src/fuse/uring_loop.h). Each round mounts the volume afresh
# with --io-uring (so the queues grow again from 8 entries a CPU), every
# other round with TESSERA_FUSE_FAULTS=slow-ring-growth (added entries
# register 2 s late), and then, each process bound to a random CPU:
#   - holders take an flock and a POSIX lock on a file;
#   - 4-40 waiters block on it, half with flock(1), half with POSIX fcntl
#     locks (python3), and 0-8 readers of .accesslog block;
#   - 5-20 probes (create, stat, read .stats, mkdir + rmdir, write + read
#     back) must each finish within 15 s while those waits hold entries;
#   - a random third of the waiters and readers are killed (SIGTERM or
#     SIGKILL): each must end within 10 s;
#   - the holder lets go: every waiter left must get the lock within 30 s;
#   - unmount: the client must exit within 10 s.
# A hang is reported (what the stuck processes and the client's threads wait
# on, tests/e2e/fuse_hang.sh), the mount aborted, and the campaign stops.
#
# Usage: scripts/campaigns/uring_waits.sh [--rounds N | --quick] [--slow-growth] [--seed N] [--keep]
#   --rounds N     default 100; --quick = 6
#   --slow-growth  every round with the fault, not every other one
#   --seed N       seeds the choices (default: random, printed)
# Binary: $TESSERA (default build/src/tessera). Needs root, /dev/fuse, python3
# and a kernel with FUSE io_uring (6.14+); turns the fuse module's
# enable_uring on and puts back the value it found. Prints one summary line;
# exits 1 if anything hung or failed.
set -euo pipefail
CAMPAIGN=uring-waits
ROUNDS=100
SEED=$((RANDOM * 32768 + RANDOM))
KEEP=0
SLOW_ALWAYS=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=${2:?}; shift ;;
    --quick) ROUNDS=6 ;;
    --slow-growth) SLOW_ALWAYS=1 ;;
    --seed) SEED=${2:?}; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage ;;
    *) echo "uring_waits.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/e2e/fuse_hang.sh
source "$REPO/tests/e2e/fuse_hang.sh"
PARAM=/sys/module/fuse/parameters/enable_uring
[ -e "$PARAM" ] || { echo "uring_waits.sh: this kernel has no FUSE io_uring ($PARAM missing)" >&2; exit 2; }
TESSERA=$(realpath "${TESSERA:-$REPO/build/src/tessera}")
[ -x "$TESSERA" ] || { echo "uring_waits.sh: no tessera binary at $TESSERA (set TESSERA)" >&2; exit 2; }
WAS=$(cat "$PARAM")
WORK=$(mktemp -d /tmp/tessera-uring-waits.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
cp "$TESSERA" "$WORK/tessera"  # a rebuild meanwhile must not change the binary
TESSERA=$WORK/tessera
FAILED=0
export HANG_BACKTRACES=$WORK/backtraces.txt  # (hang_report)
cleanup() {
  touch "$WORK/release" 2>/dev/null || true
  if mountpoint -q "$MNT" 2>/dev/null; then abort_fuse "$MNT"; umount -l "$MNT" 2>/dev/null || true; fi
  pkill -f "$WORK/" 2>/dev/null || true
  echo "$WAS" >"$PARAM" || true
  if [ "$FAILED" = 0 ] && [ "$KEEP" = 0 ]; then rm -rf "$WORK"; else echo "work directory kept: $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '[%s %s] %s\n' "$CAMPAIGN" "$(date +%T)" "$*"; }
fail() {
  FAILED=1
  printf '[%s %s] FAILED (round %s, seed %s): %s\n' "$CAMPAIGN" "$(date +%T)" "${round:-0}" "$SEED" "$*" >&2
  tail -20 "$WORK/mount.log" >&2 2>/dev/null || true
  exit 1
}
RANDOM=$SEED
cpus=$(nproc --all)
# A random CPU for the next process (chosen here: $! must be the process
# itself, which taskset becomes, not a subshell).
cpu() { CPU=$((RANDOM % cpus)); }
META="sqlite3://$WORK/meta.db"
"$TESSERA" format "$META" uring-waits --bucket "$WORK/bucket" >/dev/null
echo Y >"$PARAM"
log "seed $SEED, $ROUNDS rounds, $cpus CPUs"

# A POSIX lock waiter: blocks on a write lock of the whole file, then exits.
# (flock and POSIX locks do not conflict, so each kind has its holder.)
POSIX_WAITER='import fcntl, sys
with open(sys.argv[1], "r+") as f:
    fcntl.lockf(f, fcntl.LOCK_EX)'
POSIX_HOLDER='import fcntl, os, sys, time
with open(sys.argv[1], "r+") as f:
    fcntl.lockf(f, fcntl.LOCK_EX)
    open(sys.argv[2] + "/held2", "w").close()
    while not os.path.exists(sys.argv[2] + "/release") and os.path.isdir(sys.argv[2]):
        time.sleep(0.05)'

# probe N: one short operation of kind N % 5 through the mount.
probe() {
  local f=$MNT/p/$round.$1
  case $(($1 % 5)) in
    0) : >"$f" ;;
    1) stat "$MNT/lock" >/dev/null ;;
    2) cat "$MNT/.stats" >/dev/null ;;
    3) mkdir "$f.d" && rmdir "$f.d" ;;
    4) echo "probe $1" >"$f" && [ "$(cat "$f")" = "probe $1" ] ;;
  esac
}

waiters_total=0 readers_total=0 probes_total=0 killed_total=0 kicks_total=0 added_total=0
for round in $(seq 1 "$ROUNDS"); do
  faults=
  [ $((round % 2)) = 0 ] || [ "$SLOW_ALWAYS" = 1 ] && faults=slow-ring-growth
  TESSERA_FUSE_FAULTS=$faults "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" --io-uring >/dev/null ||
    fail "mount ${faults:+($faults) }failed"
  bounded "$MNT" 15 mkdir -p "$MNT/p" || fail "mkdir through a fresh mount"
  bounded "$MNT" 15 touch "$MNT/lock" || fail "touch through a fresh mount"
  rm -f "$WORK/release" "$WORK/held" "$WORK/held2"
  cpu
  # shellcheck disable=SC2016 # (expanded by the inner sh)
  taskset -c "$CPU" flock "$MNT/lock" sh -c 'touch "$1/held"; while [ ! -e "$1/release" ] && [ -d "$1" ]; do sleep 0.05; done' _ "$WORK" &
  holder=$!
  cpu
  taskset -c "$CPU" python3 -c "$POSIX_HOLDER" "$MNT/lock" "$WORK" &
  holder2=$!
  for _ in $(seq 1 100); do [ -e "$WORK/held" ] && [ -e "$WORK/held2" ] && break; sleep 0.1; done
  if [ ! -e "$WORK/held" ] || [ ! -e "$WORK/held2" ]; then
    hang_report "$MNT" "$holder" "$holder2"
    abort_fuse "$MNT"
    fail "the holders did not get their locks within 10 s"
  fi
  nw=$((4 + RANDOM % 37)) nr=$((RANDOM % 9)) np=$((5 + RANDOM % 16))
  waiters=() readers=()
  for i in $(seq 1 "$nw"); do
    cpu
    if [ $((i % 2)) = 0 ]; then
      taskset -c "$CPU" flock "$MNT/lock" true &
    else
      taskset -c "$CPU" python3 -c "$POSIX_WAITER" "$MNT/lock" &
    fi
    waiters+=($!)
  done
  for _ in $(seq 1 "$nr"); do
    cpu
    taskset -c "$CPU" cat "$MNT/.accesslog" >/dev/null &
    readers+=($!)
  done
  sleep 0.$((RANDOM % 10))
  probes=()
  for i in $(seq 1 "$np"); do
    cpu
    taskset -c "$CPU" bash -c "$(declare -f probe); MNT='$MNT' round=$round; probe $i" &
    probes+=($!)
  done
  rc=0
  wait_or_abort "$MNT" 15 "${probes[@]}" || rc=$?
  [ "$rc" -ne 2 ] || fail "probes still waiting 15 s after they began, with $nw lock waiters and $nr readers ${faults:+($faults) }(see above)"
  [ "$rc" -eq 0 ] || fail "a probe failed"
  # Kill a third of the waiters and readers.
  victims=()
  for p in "${waiters[@]}" "${readers[@]}"; do
    [ $((RANDOM % 3)) = 0 ] && victims+=("$p")
  done
  left=()
  for p in "${waiters[@]}"; do
    [[ " ${victims[*]} " == *" $p "* ]] || left+=("$p")
  done
  if [ ${#victims[@]} -gt 0 ]; then
    for p in "${victims[@]}"; do
      if [ $((RANDOM % 2)) = 0 ]; then kill -TERM "$p" 2>/dev/null || true; else kill -KILL "$p" 2>/dev/null || true; fi
    done
    rc=0
    wait_or_abort "$MNT" 10 "${victims[@]}" || rc=$?
    [ "$rc" -ne 2 ] || fail "killed waiters or readers still there 10 s later (see above)"
  fi
  touch "$WORK/release"
  rc=0
  wait_or_abort "$MNT" 30 "$holder" "$holder2" "${left[@]}" || rc=$?
  [ "$rc" -ne 2 ] || fail "lock waiters still waiting 30 s after the holder let go (see above)"
  [ "$rc" -eq 0 ] || fail "the holder or a lock waiter failed"
  readers_left=()
  for p in "${readers[@]}"; do
    [[ " ${victims[*]} " == *" $p "* ]] || readers_left+=("$p")
  done
  if [ ${#readers_left[@]} -gt 0 ]; then
    kill "${readers_left[@]}" 2>/dev/null || true
    rc=0
    wait_or_abort "$MNT" 10 "${readers_left[@]}" || rc=$?
    [ "$rc" -ne 2 ] || fail "killed readers of .accesslog still there 10 s later (see above)"
  fi
  bounded "$MNT" 15 cp "$MNT/.stats" "$WORK/stats" || fail "reading .stats at the end of the round"
  kicks=$(awk '/^tessera_fuse_uring_kicks_total/ {print $2}' "$WORK/stats")
  added=$(awk '/^tessera_fuse_uring_entries_added_total/ {print $2}' "$WORK/stats")
  errors=$(awk '/^tessera_fuse_uring_errors_total/ {print $2}' "$WORK/stats")
  [ "${errors:-0}" = 0 ] || fail "$errors io_uring errors in the client's counters"
  pid=$(pgrep -f "$WORK/tessera mount .* $MNT -d" | head -1)
  "$TESSERA" umount "$MNT" >/dev/null || fail "umount"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "the client still runs 10 s after its unmount"
  waiters_total=$((waiters_total + nw)) readers_total=$((readers_total + nr)) probes_total=$((probes_total + np))
  killed_total=$((killed_total + ${#victims[@]})) kicks_total=$((kicks_total + ${kicks:-0}))
  added_total=$((added_total + ${added:-0}))
  log "round $round${faults:+ ($faults)}: $nw waiters, $nr readers, $np probes, ${#victims[@]} killed; entries added $added, kicks $kicks"
done
echo "uring-waits: $ROUNDS rounds, seed $SEED: $waiters_total lock waiters, $readers_total .accesslog readers," \
  "$probes_total probes, $killed_total killed; $added_total entries added, $kicks_total kicks; nothing hung"
