#!/usr/bin/env bash
# Engine loss: outages of the metadata engine server under a running workload
# must not lose anything acknowledged, and the mount must come back by itself.
#
# One mount of a fresh volume (64 KiB blocks) on a private Redis (appendfsync
# always) or PostgreSQL server runs tests/tools/crash_workload.py (a seeded
# random mix of creates, appends/overwrites + fsync, whole-file writes +
# close, truncates + fsync, renames, unlinks, mkdir/rmdir; every acknowledged
# state journaled outside the mount) while the server is
#   (a) killed with SIGKILL and started again after 1 s, twice;
#   (b) frozen with SIGSTOP for 30 s, then SIGCONT (connections hang);
#   (c) without --quick: killed and kept down for 30 s, then started again
#       (connections refused).
# Checked: the client process survives and serves on without a remount
# (operations are acknowledged again after the last outage); the workload
# neither hangs (it stops within 300 s of SIGTERM) nor sees a state its
# journal does not allow (an operation that failed must be wholly applied or
# not at all); then the verifier on the live mount (caches dropped), a clean
# umount, `tessera fsck`, a remount and the verifier again: every file has
# exactly its acknowledged size and sha256, every name acknowledged gone is
# gone. What the workload saw is counted per outage: operations that blocked
# (took >= 1 s, and how long) and operations that failed (by errno); both are
# allowed. After a failure the workload looks at the operation's paths until
# they read back (it does nothing else meanwhile: at most a few failures per
# outage), and the time that took is shown.
#
# Usage: scripts/campaigns/engine_loss.sh [--engine redis|postgres] [--quick] [--outage S] [--seed N] [--keep]
#   --engine   default redis
#   --quick    (a) and (b) only
#   --outage   length of the outages in seconds (default 30)
# Binary: $TESSERA (default build/src/tessera). Needs root and /dev/fuse.
# Prints one summary line; exits 1 if any problem was found.
#
#   TESSERA=/tmp/tessera-snap/tessera nice -n 10 scripts/campaigns/engine_loss.sh --engine postgres
set -euo pipefail
CAMPAIGN=engine-loss
ENGINE=redis
QUICK=0
OUTAGE=30
SEED=$((RANDOM * 32768 + RANDOM))
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --engine) ENGINE=${2:?}; shift ;;
    --quick) QUICK=1 ;;
    --outage) OUTAGE=${2:?}; shift ;;
    --seed) SEED=${2:?}; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage ;;
    *) echo "engine_loss.sh: unknown argument $1" >&2; usage ;;
  esac
  shift
done
case $ENGINE in redis | postgres) ;; *) echo "engine_loss.sh: --engine redis or postgres" >&2; exit 2 ;; esac
# shellcheck source=crash_common.sh
. "$(dirname "$0")/crash_common.sh"

campaign_init "$ENGINE"
JOURNAL=$WORK/journal
EVENTS=$WORK/events
PHASES=$WORK/phases
: >"$EVENTS"
: >"$PHASES"
log "engine $ENGINE, outages of ${OUTAGE} s, seed $SEED, work $WORK"
format_volume
mount_volume || { problem "mount failed"; exit 1; }
CLIENT_LOG=$MOUNT_LOG
CLIENT_PID=$(mount_pid)
[ -n "$CLIENT_PID" ] || { problem "cannot find the client process"; exit 1; }

now() { date +%s.%N; }
phase() { echo "$1 $2 $3" >>"$PHASES"; }
# Did the workload (still running) acknowledge an operation after time $1?
acked_after() {
  python3 - "$JOURNAL" "$1" <<'PY'
import json, sys
t = float(sys.argv[2])
for line in open(sys.argv[1]):
    if line.endswith("\n"):
        r = json.loads(line)
        if r["k"] == "done" and r.get("time", 0) > t:
            sys.exit(0)
sys.exit(1)
PY
}
client_alive() {
  kill -0 "$CLIENT_PID" 2>/dev/null && mountpoint -q "$MNT" ||
    { problem "the client process died or the mount went away ($1); see $CLIENT_LOG"; tail -20 "$CLIENT_LOG" >&2; return 1; }
}
workload_alive() {
  kill -0 "$WORKLOAD_PID" 2>/dev/null ||
    { problem "the workload stopped ($1): $(tail -5 "$WORK/logs/run.log")"; return 1; }
}
# Waits up to 120 s for an acknowledged operation after time $1.
recovered() {
  local i
  for ((i = 0; i < 1200; i++)); do
    acked_after "$1" && return 0
    kill -0 "$WORKLOAD_PID" 2>/dev/null || break
    sleep 0.1
  done
  problem "no operation acknowledged within 120 s after $2 (the mount did not recover)"
  return 1
}

python3 "$WORKLOAD" run --dir "$MNT/w" --journal "$JOURNAL" --seed "$SEED" --duration 3600 \
  --events "$EVENTS" --slow 1 --resolve-timeout 300 >"$WORK/logs/run.log" 2>&1 &
WORKLOAD_PID=$!
sleep 4
workload_alive "before the first outage" || exit 1

for k in 1 2; do
  log "(a) SIGKILL of the $ENGINE server, restart after 1 s ($k of 2)"
  t0=$(now)
  engine_kill
  sleep 1
  engine_start_again || problem "the $ENGINE server did not start again"
  t1=$(now)
  phase "kill-restart-$k" "$t0" "$t1"
  recovered "$t1" "restart $k" || true
  sleep 4
  client_alive "after restart $k" && workload_alive "after restart $k" || exit 1
done

log "(b) SIGSTOP of the $ENGINE server for ${OUTAGE} s, then SIGCONT"
t0=$(now)
engine_signal STOP
sleep "$OUTAGE"
engine_signal CONT
t1=$(now)
phase "sigstop-${OUTAGE}s" "$t0" "$t1"
recovered "$t1" "the SIGSTOP outage" || true
sleep 4
client_alive "after the SIGSTOP outage" && workload_alive "after the SIGSTOP outage" || exit 1

if [ "$QUICK" = 0 ]; then
  log "(c) the $ENGINE server killed and down for ${OUTAGE} s, then started again"
  t0=$(now)
  engine_kill
  sleep "$OUTAGE"
  engine_start_again || problem "the $ENGINE server did not start again"
  t1=$(now)
  phase "down-${OUTAGE}s" "$t0" "$t1"
  recovered "$t1" "the ${OUTAGE} s server down time" || true
  sleep 4
  client_alive "after the down time" && workload_alive "after the down time" || exit 1
fi

log "stopping the workload (SIGTERM: it finishes its operation)"
kill -TERM "$WORKLOAD_PID"
if ! wait_for "$WORKLOAD_PID" 300; then
  problem "the workload did not stop within 300 s of SIGTERM (hang)"
  hang_evidence "$WORKLOAD_PID" >&2
  exit 1
fi
WORKLOAD_PID=
[ "$WAITED_RC" -eq 0 ] || problem "the workload exited $WAITED_RC: $(grep -h PROBLEM "$WORK/logs/run.log" | head -5)"
grep '^crash_workload run:' "$WORK/logs/run.log" || true
[ "$(mount_pid)" = "$CLIENT_PID" ] || problem "the client process changed (was $CLIENT_PID, now $(mount_pid))"

# Runs the verifier; $1 names the step.
BYTES=0
ACKED=0
verify() {
  local out=$WORK/logs/verify.$1.log rc=0 summary
  timeout 900 python3 "$WORKLOAD" verify --dir "$MNT/w" --journal "$JOURNAL" >"$out" 2>&1 || rc=$?
  summary=$(grep '^crash_workload verify:' "$out" || true)
  if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
    problem "verify ($1) failed (exit $rc), see $out"
    grep -E '^(PROBLEM|history of)' "$out" | head -20 >&2 || tail -5 "$out" >&2
    return 1
  fi
  log "verify ($1): ${summary#crash_workload verify: }"
  BYTES=$((BYTES + $(sed -n 's/.*bytes_verified=\([0-9]*\).*/\1/p' <<<"$summary")))
  ACKED=$(sed -n 's/.*acked_ops=\([0-9]*\).*/\1/p' <<<"$summary")
}
sync
echo 3 >/proc/sys/vm/drop_caches
verify live || true
timeout 120 "$TESSERA" umount "$MNT" >"$WORK/logs/umount.log" 2>&1 || problem "umount failed: $(tail -3 "$WORK/logs/umount.log")"
if timeout 600 "$TESSERA" fsck "$META" >"$WORK/logs/fsck.log" 2>&1; then
  log "fsck clean"
else
  problem "fsck not clean, see $WORK/logs/fsck.log"
  head -20 "$WORK/logs/fsck.log" >&2
fi
if mount_volume; then
  verify remount || true
  timeout 120 "$TESSERA" umount "$MNT" >/dev/null 2>&1 || problem "last umount failed"
else
  problem "remount failed, see $MOUNT_LOG"
fi

# What the workload saw, per outage (an operation belongs to an outage if it
# ran at some time between the outage's start and 10 s after its end).
log "what the workload saw (blocked: took >= 1 s; failed: returned an error):"
counts=$(python3 - "$EVENTS" "$PHASES" <<'PY'
import json, sys
from collections import Counter
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
phases = [(n, float(a), float(b)) for n, a, b in (l.split() for l in open(sys.argv[2]) if l.strip())]
def phase_of(e):  # the last outage the operation overlaps (with 10 s after it)
    start, end = e["time"] - e["dur"], e["time"]
    hit = [n for n, a, b in phases if start <= b + 10 and end >= a]
    return hit[-1] if hit else "outside any outage"
by = {}
for e in events:
    by.setdefault(phase_of(e), []).append(e)
for n in [p[0] for p in phases] + ["outside any outage"]:
    es = by.get(n, [])
    if not es and n == "outside any outage":
        continue
    slow = [e for e in es if e["kind"] == "slow"]
    failed = [e for e in es if e["kind"] == "failed"]
    errs = ", ".join("%s x%d" % kv for kv in sorted(Counter(e["errno"] for e in failed).items()))
    print("  %-20s blocked %d (longest %.1f s), failed %d%s" % (
        n, len(slow), max([e["dur"] for e in slow], default=0), len(failed),
        " (%s; longest %.1f s before the error)" % (errs, max(e["dur"] for e in failed)) if failed else ""), file=sys.stderr)
    for e in es:
        print("    op %d %s: %s after %.2f s%s" % (
            e["seq"], e["op"], e.get("errno", "acknowledged"), e["dur"],
            "; its paths read back (errors until then) %.2f s later" % e["resolve_s"] if "resolve_s" in e else ""),
            file=sys.stderr)
slow = [e for e in events if e["kind"] == "slow"]
failed = [e for e in events if e["kind"] == "failed"]
print("%d %.1f %d" % (len(slow), max([e["dur"] for e in slow], default=0), len(failed)))
PY
)
read -r BLOCKED LONGEST FAILED <<<"$counts"
log "client log ($CLIENT_LOG): $(grep -c '<WARN>' "$CLIENT_LOG" || true) warnings, $(grep -c '<ERROR>' "$CLIENT_LOG" || true) errors; kinds (digits as #):"
grep -h '<WARN>\|<ERROR>' "$CLIENT_LOG" | sed 's/^[0-9-]* [0-9:.]* tessera\[[0-9]*\] //; s/[0-9][0-9.]*/#/g' | cut -c1-160 |
  sort | uniq -c | sort -rn | head -8 || true
echo "engine_loss: engine=$ENGINE outage=${OUTAGE}s seed=$SEED ops_acknowledged=$ACKED bytes_verified=$BYTES" \
  "blocked=$BLOCKED longest_block_s=$LONGEST failed=$FAILED problems=$PROBLEMS"
[ "$PROBLEMS" -eq 0 ]
