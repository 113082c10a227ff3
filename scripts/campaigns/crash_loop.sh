#!/usr/bin/env bash
# Crash loop: "after fsync/close returns, data and metadata survive a client
# crash", checked many times over on one volume.
#
# Formats a volume (64 KiB blocks) on a private engine server, then each
# iteration: mounts it, runs tests/tools/crash_workload.py (a seeded random
# mix of creates, appends/overwrites + fsync, whole-file writes + close,
# truncates + fsync, renames, unlinks, mkdir/rmdir; every acknowledged state
# journaled outside the mount, continuing the same tree and journal across
# iterations), kill -9s the client process 0.2-3 s after the workload began
# its operations, checks the workload got out (ENOTCONN) instead of hanging,
# lazily unmounts the dead mount, runs `tessera fsck` (must be clean),
# remounts and runs the verifier: every file
# has exactly its acknowledged size and sha256, every name acknowledged gone
# is gone, nothing unknown exists, and the operation in flight at the kill is
# wholly applied or not at all; no operation may fail (EIO, ...) while the
# client is alive. At the end: a clean umount (--flush with
# --writeback), fsck, a mount without --writeback, and a last verify.
#
# Usage: scripts/campaigns/crash_loop.sh [--iterations N | --quick] [--engine sqlite|redis|postgres]
#                                        [--writeback] [--commit-delay MS] [--seed N] [--keep-going] [--keep]
#   --iterations N  default 100; --quick = 5 (CI)
#   --engine        metadata engine (default sqlite); redis runs with appendfsync always
#   --writeback     mount with --writeback (staging on a cache dir kept across crashes)
#   --commit-delay  mount with --commit-delay MS (sqlite: changes answered before their
#                   COMMIT, kept by the redo journal; e.g. 1000 makes every kill land
#                   inside a delayed transaction)
#   --seed N        seeds the workload and the kill delays (default: random, printed)
#   --keep-going    after a problem, accept what is there and go on (default: stop)
#   --keep          keep the work directory (always kept when a problem was found)
# Binary: $TESSERA (default build/src/tessera). Needs root and /dev/fuse.
# Prints one summary line; exits 1 if any problem was found.
#
#   TESSERA=/tmp/tessera-snap/tessera nice -n 10 scripts/campaigns/crash_loop.sh --quick --engine redis
set -euo pipefail
CAMPAIGN=crash-loop
ITERATIONS=100
ENGINE=sqlite
WRITEBACK=0
COMMIT_DELAY=
SEED=$((RANDOM * 32768 + RANDOM))
KEEP_GOING=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --iterations) ITERATIONS=${2:?}; shift ;;
    --quick) ITERATIONS=5 ;;
    --engine) ENGINE=${2:?}; shift ;;
    --writeback) WRITEBACK=1 ;;
    --commit-delay) COMMIT_DELAY=${2:?}; shift ;;
    --seed) SEED=${2:?}; shift ;;
    --keep-going) KEEP_GOING=1 ;;
    --keep) KEEP=1 ;;
    -h | --help) usage ;;
    *) echo "crash_loop.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
# shellcheck source=crash_common.sh
. "$(dirname "$0")/crash_common.sh"

RANDOM=$SEED
campaign_init "$ENGINE"
if [ "$WRITEBACK" = 1 ]; then MOUNT_OPTS=(--writeback --cache-dir "$WORK/cache"); fi
if [ -n "$COMMIT_DELAY" ]; then MOUNT_OPTS+=(--commit-delay "$COMMIT_DELAY"); fi
JOURNAL=$WORK/journal
log "engine $ENGINE, writeback $([ "$WRITEBACK" = 1 ] && echo on || echo off), $ITERATIONS iterations, seed $SEED, work $WORK"
format_volume

ACKED=0
BYTES=0
DONE=0
APPLIED=0
NOT_APPLIED=0
FAILED_OPS=0

# Runs the verifier; adds its bytes and acknowledged-operation count. $1 names the step.
verify() {
  local out=$WORK/logs/verify.$1.log rc=0 adopt=()
  if [ "$KEEP_GOING" = 1 ]; then adopt=(--adopt); fi
  timeout 900 python3 "$WORKLOAD" verify --dir "$MNT/w" --journal "$JOURNAL" "${adopt[@]}" >"$out" 2>&1 || rc=$?
  local summary
  summary=$(grep '^crash_workload verify:' "$out" || true)
  if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
    problem "verify ($1) failed (exit $rc): $(grep -c '^PROBLEM' "$out" || true) problem line(s), see $out"
    grep -E '^(PROBLEM|history of)' "$out" | head -20 >&2 || tail -5 "$out" >&2
    return 1
  fi
  BYTES=$((BYTES + $(sed -n 's/.*bytes_verified=\([0-9]*\).*/\1/p' <<<"$summary")))
  ACKED=$(sed -n 's/.*acked_ops=\([0-9]*\).*/\1/p' <<<"$summary")
  if [ "$1" != final ]; then  # (the final verify sees the last iteration's in-flight operation again)
    case $summary in
      *inflight=op_*_not-applied\ *) NOT_APPLIED=$((NOT_APPLIED + 1)) ;;
      *inflight=op_*) APPLIED=$((APPLIED + 1)) ;;
    esac
  fi
  VERIFY_SUMMARY=${summary#crash_workload verify: }
}

fsck_volume() {
  local out=$WORK/logs/fsck.$1.log
  if ! timeout 600 "$TESSERA" fsck "$META" >"$out" 2>&1; then
    problem "fsck ($1) not clean, see $out"
    head -20 "$out" >&2
    return 1
  fi
}

stop_here() { [ "$PROBLEMS" -gt 0 ] && [ "$KEEP_GOING" = 0 ]; }

for ((i = 1; i <= ITERATIONS; i++)); do
  it=$(printf %03d "$i")
  if ! mountpoint -q "$MNT"; then
    mount_volume || { problem "iteration $i: mount failed, see $MOUNT_LOG"; break; }
  fi
  CLIENT_LOG=$MOUNT_LOG
  pid=$(mount_pid)
  [ -n "$pid" ] || { problem "iteration $i: cannot find the client process of $MNT"; break; }
  rm -f "$WORK/ready"
  python3 "$WORKLOAD" run --dir "$MNT/w" --journal "$JOURNAL" --seed "$SEED" --duration 300 \
    --ready "$WORK/ready" --events "$WORK/events" >"$WORK/logs/run.$it.log" 2>&1 &
  WORKLOAD_PID=$!
  # The kill comes 0.2-3 s after the workload began its operations (it first
  # resolves the operation left in flight by the previous kill).
  for _ in $(seq 1 1200); do
    [ -e "$WORK/ready" ] || ! kill -0 "$WORKLOAD_PID" 2>/dev/null && break
    sleep 0.05
  done
  delay_ms=$((200 + RANDOM % 2801))
  sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))"
  if ! kill -0 "$WORKLOAD_PID" 2>/dev/null; then
    wait "$WORKLOAD_PID" || true
    problem "iteration $i: the workload ended before the kill: $(tail -3 "$WORK/logs/run.$it.log")"
    WORKLOAD_PID=
    break
  fi
  kill -9 "$pid"
  # The kernel aborts the FUSE connection when the client dies: the workload
  # must get ENOTCONN at once, not hang.
  if ! wait_for "$WORKLOAD_PID" 60; then
    problem "iteration $i: the workload still runs 60 s after the client was killed (hang)"
    hang_evidence "$WORKLOAD_PID" >&2
    kill -9 "$WORKLOAD_PID" 2>/dev/null || true
    wait "$WORKLOAD_PID" 2>/dev/null || true
  elif [ "$WAITED_RC" -ne 3 ]; then
    problem "iteration $i: the workload exited $WAITED_RC (want 3: mount gone): $(tail -3 "$WORK/logs/run.$it.log")"
  fi
  WORKLOAD_PID=
  # Without an engine outage no operation may fail (EIO and the like).
  failed=$(grep -c '"kind": "failed"' "$WORK/events" 2>/dev/null || true)
  if [ "${failed:-0}" -gt "$FAILED_OPS" ]; then
    problem "iteration $i: $((failed - FAILED_OPS)) operation(s) failed while the client was alive:" \
      "$(grep '"kind": "failed"' "$WORK/events" | tail -n $((failed - FAILED_OPS)) | head -5)"
    FAILED_OPS=$failed
  fi
  run_summary=$(grep '^crash_workload run:' "$WORK/logs/run.$it.log" | sed 's/.* acked=\([0-9]*\).*/\1/' || true)
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  umount -l "$MNT" 2>/dev/null || true
  stop_here && break
  fsck_volume "$it" || true
  stop_here && break
  mount_volume || { problem "iteration $i: remount after the crash failed, see $MOUNT_LOG"; break; }
  verify "$it" || true
  DONE=$i
  stop_here && break
  log "iteration $i/$ITERATIONS: client killed after ${delay_ms} ms (${run_summary:-?} ops acked this run); fsck clean; $VERIFY_SUMMARY"
done

if ! stop_here; then
  log "final: clean umount$([ "$WRITEBACK" = 1 ] && echo ' --flush'), fsck, mount without --writeback, verify"
  if mountpoint -q "$MNT"; then
    if [ "$WRITEBACK" = 1 ]; then flush=(--flush); else flush=(); fi
    timeout 600 "$TESSERA" umount "${flush[@]}" "$MNT" >"$WORK/logs/umount.final.log" 2>&1 ||
      problem "final umount failed: $(tail -3 "$WORK/logs/umount.final.log")"
  fi
  fsck_volume final || true
  MOUNT_OPTS=()
  if mount_volume; then
    verify final || true
    timeout 120 "$TESSERA" umount "$MNT" >/dev/null 2>&1 || problem "last umount failed"
  else
    problem "final mount failed, see $MOUNT_LOG"
  fi
fi
[ "$PROBLEMS" -eq 0 ] || log "mount log of the last client killed: ${CLIENT_LOG:-none}; work dir $WORK"
echo "crash_loop: engine=$ENGINE writeback=$([ "$WRITEBACK" = 1 ] && echo on || echo off) seed=$SEED" \
  "iterations=$DONE/$ITERATIONS ops_acknowledged=$ACKED bytes_verified=$BYTES" \
  "inflight_applied=$APPLIED inflight_not_applied=$NOT_APPLIED problems=$PROBLEMS"
[ "$PROBLEMS" -eq 0 ]
