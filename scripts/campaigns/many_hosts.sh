#!/usr/bin/env bash
# Many hosts campaign: two clients, each in its own network namespace (its own
# "host": a veth pair to this machine), mount one volume on Redis + S3 (both
# servers on this machine, reached at 10.77.0.1). Client A holds a flock and an
# open file with unwritten data; then its link goes down for longer than the
# session timeout. What must hold:
#   - client B gets the lock within the documented bound (session timeout +
#     half of it for B's periodic cleaning + a heartbeat), and writes;
#   - while cut off, A's fsync blocks and then fails (EIO), it never hangs;
#   - when A's link comes back, A notices its session expired: its file opened
#     before fails with EIO and its unwritten data never lands over B's; new
#     files on A work (a new session);
#   - both mounts read B's data; fsck is clean.
# Rounds repeat the whole scenario (default 3; --quick: 1).
#   scripts/campaigns/many_hosts.sh [--quick] [--rounds N] [--timeout S]
# TESSERA: the binary (default build/src/tessera). Needs root, ip(8), nsenter;
# exits 77 (skipped, says why) where network namespaces cannot be created.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TESSERA=$(realpath "${TESSERA:-$REPO/build/src/tessera}")
TOOLS=$REPO/tests/tools
ROUNDS=3
TIMEOUT=15
while [ $# -gt 0 ]; do
  case $1 in
    --quick) ROUNDS=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--rounds N] [--timeout S]" >&2; exit 2 ;;
  esac
done
[ -x "$TESSERA" ] || { echo "many_hosts: no tessera binary at $TESSERA" >&2; exit 2; }

TAG=t$$
WORK=$(mktemp -d /tmp/tessera-hosts.XXXXXX)
PROBLEMS=0
PIDS=()
log() { printf '[many_hosts %s] %s\n' "$(date +%T)" "$*"; }
problem() { PROBLEMS=$((PROBLEMS + 1)); printf '[many_hosts %s] PROBLEM: %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
  for m in "$WORK"/ma "$WORK"/mb; do mountpoint -q "$m" && { "$TESSERA" umount "$m" >/dev/null 2>&1 || umount -l "$m"; }; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for x in a b; do
    ip link del "vh$x$TAG" 2>/dev/null || true
    ip netns del "$TAG$x" 2>/dev/null || true
  done
  ip addr del 10.77.0.1/32 dev lo 2>/dev/null || true
  bash "$TOOLS/redis-server.sh" stop "$WORK/redis" >/dev/null 2>&1 || true
  bash "$TOOLS/s3-server.sh" stop "$WORK/s3" >/dev/null 2>&1 || true
  if [ "$PROBLEMS" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- the network
# 10.77.0.1 is this machine's address for the clients (on its loopback
# interface); client X is 10.77.N.2 behind veth vhX/vnX (N = 1 for a, 2 for b).
if ! command -v ip >/dev/null || ! ip netns add "${TAG}probe" 2>/dev/null; then
  echo "many_hosts: SKIPPED: cannot create network namespaces here (needs ip(8) from iproute2 and root)" >&2
  exit 77
fi
ip netns del "${TAG}probe"
ip addr add 10.77.0.1/32 dev lo
n=0
for x in a b; do
  n=$((n + 1))
  ip netns add "$TAG$x"
  ip link add "vh$x$TAG" type veth peer name "vn$x$TAG"
  ip link set "vn$x$TAG" netns "$TAG$x"
  ip addr add "10.77.$n.1/24" dev "vh$x$TAG"
  ip link set "vh$x$TAG" up
  ip netns exec "$TAG$x" ip addr add "10.77.$n.2/24" dev "vn$x$TAG"
  ip netns exec "$TAG$x" ip link set "vn$x$TAG" up
  ip netns exec "$TAG$x" ip link set lo up
  ip netns exec "$TAG$x" ip route add 10.77.0.1/32 via "10.77.$n.1"
done
# In a client's network, with this machine's mounts (only the network differs).
in_net() { local x=$1; shift; nsenter --net="/run/netns/$TAG$x" "$@"; }

# ---------------------------------------------------------------- servers
bash "$TOOLS/redis-server.sh" start "$WORK/redis" >/dev/null
# shellcheck disable=SC1091
source "$WORK/redis/env"
bash "$TOOLS/s3-server.sh" start "$WORK/s3" >/dev/null
# shellcheck disable=SC1091
source "$WORK/s3/env"
redis_port=${TESSERA_TEST_REDIS_URL##*:}
redis_port=${redis_port%%/*}
s3_port=${TESSERA_TEST_S3_ENDPOINT##*:}
forward() {  # forward PORT: 10.77.0.1:PORT -> 127.0.0.1:PORT
  python3 -u "$TOOLS/tcp_proxy.py" --listen "10.77.0.1:$1" --to "127.0.0.1:$1" >"$WORK/proxy-$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 50); do grep -qs listening "$WORK/proxy-$1.log" && return 0; sleep 0.1; done
  problem "proxy for port $1 did not start"
  exit 1
}
forward "$redis_port"
forward "$s3_port"
META="redis://10.77.0.1:$redis_port/0"
in_net a "$TESSERA" format "$META" hosts --storage s3 --bucket "http://10.77.0.1:$s3_port/hosts" --trash-days 0 >/dev/null 2>&1
bound=$((TIMEOUT + TIMEOUT / 2 + TIMEOUT / 5 + 5))
log "clients in namespaces $TAG""a and $TAG""b; session timeout $TIMEOUT s, lock takeover bound $bound s"

mkdir -p "$WORK/ma" "$WORK/mb"
mount_client() { in_net "$1" "$TESSERA" mount "$META" "$WORK/m$1" -d --log "$WORK/mount-$1.log" --session-timeout "$TIMEOUT" >/dev/null 2>&1; }
mount_client a
mount_client b

for round in $(seq 1 "$ROUNDS"); do
  f=shared$round
  echo "version one from a" >"$WORK/ma/$f"
  # A holds the flock and a file with data written but not yet committed.
  python3 - "$WORK/ma/$f" "$WORK/a-$round" <<'PY' &
import fcntl, os, sys, time
path, state = sys.argv[1], sys.argv[2]
lock = os.open(path, os.O_RDWR)
fcntl.flock(lock, fcntl.LOCK_EX)
fd = os.open(path, os.O_RDWR)
os.pwrite(fd, b"UNWRITTEN DATA OF THE CUT-OFF CLIENT\n", 0)  # buffered in a's client
open(state + ".holding", "w").close()
while not os.path.exists(state + ".cut"):
    time.sleep(0.05)
t = time.time()
try:
    os.fsync(fd)  # a is cut off: this must end, with an error
    outcome = "fsync ok"
except OSError as e:
    outcome = "fsync errno %d" % e.errno
with open(state + ".during", "w") as f:
    f.write("%s after %.1f s\n" % (outcome, time.time() - t))
while not os.path.exists(state + ".back"):
    time.sleep(0.05)
time.sleep(2)
try:
    os.pwrite(fd, b"LATE WRITE OF THE OLD SESSION\n", 0)
    os.fsync(fd)
    late = "late write ok"
except OSError as e:
    late = "late write errno %d" % e.errno
with open(state + ".after", "w") as f:
    f.write(late + "\n")
PY
  holder=$!
  for _ in $(seq 1 100); do [ -e "$WORK/a-$round.holding" ] && break; sleep 0.1; done
  flock -n "$WORK/mb/$f" true && problem "round $round: b got the lock a holds"
  ip link set "vha$TAG" down
  touch "$WORK/a-$round.cut"
  start=$SECONDS
  if flock -w $((bound + 30)) "$WORK/mb/$f" sh -c "echo 'version two from b' >'$WORK/mb/$f'"; then
    took=$((SECONDS - start))
    [ "$took" -le "$bound" ] || problem "round $round: b waited $took s for the lock (bound $bound s)"
  else
    took=-1
    problem "round $round: b never got the lock of the cut-off client"
  fi
  # Bounded: the engine's retry window (~25 s) or the object store's (~30 s
  # plus a try), whichever the fsync meets first; see docs/consistency.md.
  for _ in $(seq 1 900); do [ -e "$WORK/a-$round.during" ] && break; sleep 0.1; done
  during=$(cat "$WORK/a-$round.during" 2>/dev/null || echo "still blocked after 90 s")
  case $during in "fsync errno"*) ;; *) problem "round $round: a's fsync while cut off: $during (want an error)" ;; esac
  ip link set "vha$TAG" up
  touch "$WORK/a-$round.back"
  wait "$holder" || problem "round $round: a's holder process failed"
  after=$(cat "$WORK/a-$round.after" 2>/dev/null || echo missing)
  [ "$after" = "late write errno 5" ] || problem "round $round: a's old file after the expiry: $after (want EIO)"
  sleep 1.5
  for m in ma mb; do
    got=$(cat "$WORK/$m/$f")
    [ "$got" = "version two from b" ] || problem "round $round: $m reads '$got' (want b's data)"
  done
  echo "new session" >"$WORK/ma/new$round" || problem "round $round: a cannot create files in its new session"
  [ "$(cat "$WORK/mb/new$round" 2>/dev/null)" = "new session" ] || problem "round $round: b does not see a's new file"
  log "round $round: b took the lock after $took s; a while cut off: $during; a afterwards: $after"
done

grep -q "session expired" "$WORK/mount-a.log" || problem "a never logged its session's expiry"
"$TESSERA" umount "$WORK/ma" >/dev/null
"$TESSERA" umount "$WORK/mb" >/dev/null
"$TESSERA" fsck "$META" >/dev/null || problem "fsck"
log "done: $ROUNDS round(s), $PROBLEMS problem(s)"
[ "$PROBLEMS" -eq 0 ]
