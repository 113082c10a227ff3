#!/usr/bin/env bash
# Object store faults campaign: fsx-style random I/O (tests/e2e/fsx.cc, every
# result checked against a model) on a volume whose object store misbehaves,
# for a fixed time, in two setups:
#   1. the fault-injecting store (TESSERA_OBJECT_FAULTS): 5% of requests fail
#      before reaching the store, 1% lose their reply after it acted, 1% drop
#      the connection mid-way; local directory underneath; background
#      compaction forced often;
#   2. a real S3 server (Swift's s3api, tests/tools/s3-server.sh) behind a TCP
#      proxy (tests/tools/tcp_proxy.py) that cuts 1% of the transfers
#      mid-stream and delays others by up to 20 ms.
# What must hold: fsx finds no wrong byte, no operation fails (every fault is
# retried away: EIO only when retries are exhausted, which at these rates
# practically never happens), and the data reads back after a remount without
# faults. Prints one summary line per setup; exit 1 on any problem.
#
#   scripts/campaigns/object_faults.sh [--minutes N] [--quick] [--setup store|s3|both]
# --quick: 1 minute per setup (CI); default 10 minutes per setup.
# TESSERA (default build/src/tessera) and FSX (default build/tests/e2e/e2e_fsx).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TESSERA=$(realpath "${TESSERA:-$REPO/build/src/tessera}")
FSX=$(realpath "${FSX:-$REPO/build/tests/e2e/e2e_fsx}")
TOOLS=$REPO/tests/tools
MINUTES=10
OPS=3000  # per fsx run
SETUP=both
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --quick) MINUTES=1; OPS=800; shift ;;
    --setup) SETUP=$2; shift 2 ;;
    *) echo "usage: $0 [--minutes N] [--quick] [--setup store|s3|both]" >&2; exit 2 ;;
  esac
done
[ -x "$TESSERA" ] && [ -x "$FSX" ] || { echo "object_faults: build first (need $TESSERA and $FSX)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/tessera-objfaults.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
PROBLEMS=0
PROXY_PID=
log() { printf '[object_faults %s] %s\n' "$(date +%T)" "$*"; }
problem() { PROBLEMS=$((PROBLEMS + 1)); printf '[object_faults %s] PROBLEM: %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
  mountpoint -q "$MNT" && { "$TESSERA" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT"; }
  [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
  [ -d "$WORK/s3" ] && bash "$TOOLS/s3-server.sh" stop "$WORK/s3" >/dev/null 2>&1
  if [ "$PROBLEMS" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT

# Runs fsx on two files at once for MINUTES, seed after seed; sets RUNS and DONE_OPS.
fsx_for_minutes() {
  local label=$1 deadline=$((SECONDS + MINUTES * 60)) seed=1 pids f rc
  RUNS=0
  DONE_OPS=0
  while [ $SECONDS -lt $deadline ]; do
    pids=()
    for f in a b; do
      local s=$((seed * 2 + $([ $f = a ] && echo 0 || echo 1)))
      "$FSX" -k -N "$OPS" -S "$s" -b 65536 -l $((4 << 20)) "$MNT/fsx-$f" >"$WORK/fsx-$label-$f.log" 2>&1 &
      pids+=($!)
    done
    for i in 0 1; do
      f=$([ $i = 0 ] && echo a || echo b)
      rc=0
      wait "${pids[$i]}" || rc=$?
      [ "$rc" = 2 ] && { problem "$label: fsx refused its arguments"; exit 1; }
      [ "$rc" = 0 ] || problem "$label: fsx seed $((seed * 2 + i)) on file $f failed: $(tail -5 "$WORK/fsx-$label-$f.log" | tr '\n' ' ')"
    done
    RUNS=$((RUNS + 2))
    DONE_OPS=$((DONE_OPS + 2 * OPS))
    seed=$((seed + 1))
  done
}

# The final content of the fsx files reads the same after a remount without faults.
check_after_remount() {
  local label=$1 meta=$2
  md5sum "$MNT"/fsx-a "$MNT"/fsx-b >"$WORK/sums-$label"
  "$TESSERA" umount "$MNT"
  "$TESSERA" mount "$meta" "$MNT" -d --log "$WORK/mount-$label-2.log" >/dev/null 2>&1
  md5sum -c --quiet "$WORK/sums-$label" || problem "$label: files differ after a remount without faults"
  "$TESSERA" umount "$MNT"
  "$TESSERA" fsck "$meta" >/dev/null || problem "$label: fsck found problems"
}

if [ "$SETUP" = store ] || [ "$SETUP" = both ]; then
  META="sqlite3://$WORK/store.db"
  "$TESSERA" format "$META" objfaults --bucket "$WORK/bucket" --block-size 64 --trash-days 0 >/dev/null 2>&1
  SPEC="seed=$RANDOM,error=0.05,lost_reply=0.01,drop=0.01"
  log "setup 1: fault-injecting store ($SPEC) for $MINUTES min"
  TESSERA_OBJECT_FAULTS=$SPEC "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount-store.log" --compact-threshold 8 \
    >/dev/null 2>&1
  fsx_for_minutes store
  retried=$(grep -c "retrying in" "$WORK/mount-store.log" || true)
  gaveup=$(grep -c "gave up after" "$WORK/mount-store.log" || true)
  [ "$retried" -gt 0 ] || problem "store: no fault was injected"
  [ "$gaveup" -eq 0 ] || problem "store: $gaveup request(s) exhausted their retries"
  check_after_remount store "$META"
  log "store: $MINUTES min, fsx runs $RUNS, operations $DONE_OPS, faults retried $retried, retries exhausted $gaveup, problems $PROBLEMS"
fi

if [ "$SETUP" = s3 ] || [ "$SETUP" = both ]; then
  bash "$TOOLS/s3-server.sh" start "$WORK/s3" >/dev/null
  # shellcheck disable=SC1091
  source "$WORK/s3/env"
  upstream=${TESSERA_TEST_S3_ENDPOINT#http://}
  python3 -u "$TOOLS/tcp_proxy.py" --listen 127.0.0.1:0 --to "$upstream" --drop 0.01 --delay-ms 0-20 --delay 0.3 \
    --seed "$RANDOM" >"$WORK/proxy.log" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 1 50); do grep -q listening "$WORK/proxy.log" && break; sleep 0.1; done
  proxy=$(awk '/listening/{print $2}' "$WORK/proxy.log")
  [ -n "$proxy" ] || { problem "s3: the proxy did not start"; exit 1; }
  META="sqlite3://$WORK/s3.db"
  "$TESSERA" format "$META" objfaults-s3 --storage s3 --bucket "http://$proxy/objfaults" --block-size 64 --trash-days 0 >/dev/null
  log "setup 2: S3 server behind a proxy dropping 1% of transfers and delaying some, for $MINUTES min"
  "$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount-s3.log" --compact-threshold 8 >/dev/null 2>&1
  fsx_for_minutes s3
  retried=$(grep -c "retrying in" "$WORK/mount-s3.log" || true)
  gaveup=$(grep -c "gave up after" "$WORK/mount-s3.log" || true)
  [ "$gaveup" -eq 0 ] || problem "s3: $gaveup request(s) exhausted their retries"
  kill "$PROXY_PID"
  wait "$PROXY_PID" 2>/dev/null || true
  PROXY_PID=
  counters=$(grep '^connections' "$WORK/proxy.log" || echo "no counters")
  # Remount straight to the server: the data is there, not just in the proxy's path.
  python3 -u "$TOOLS/tcp_proxy.py" --listen "$proxy" --to "$upstream" >"$WORK/proxy2.log" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 1 50); do grep -q listening "$WORK/proxy2.log" && break; sleep 0.1; done
  check_after_remount s3 "$META"
  log "s3: $MINUTES min, fsx runs $RUNS, operations $DONE_OPS, proxy: $counters, requests retried $retried, retries exhausted $gaveup, problems $PROBLEMS"
fi

log "done: $PROBLEMS problem(s)"
[ "$PROBLEMS" -eq 0 ]
