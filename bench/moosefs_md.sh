#!/usr/bin/env bash
# bench/moosefs_md.sh — the metadata workload (bench/mdbench.c, mdtest shape of
# the JuiceFS seed: -b 6 -z 4 -I 8, empty files, 1.5 s settle before the stat
# and read phases) on three targets, in alternating rounds in one run:
#   tessera-sqlite  fresh `tessera format sqlite3://…` volume, local-dir bucket
#   tessera-redis   the same on a private redis-server (tests/tools/redis-server.sh:
#                   loopback TCP, AOF everysec), flushed before each round
#   moosefs         MooseFS 3.0 (Debian): a private mfsmaster + mfschunkserver
#                   with fresh metadata each round, mounted with mfsmount defaults
# Each round mounts each target afresh; the order rotates from round to round.
# MooseFS refuses a master on 127.0.0.0/8: the master, chunkserver and client
# talk over 10.254.0.1, put on a veth pair (tmfs0/tmfs1) made for the run.
# MooseFS runs at NICE_LEVEL 0 (its default is -19), like tessera and redis.
# usage: bench/moosefs_md.sh [--rounds 2] [--procs 1] [--tessera BIN] [--work DIR]
#        [--install] [--keep] [--quick] [-h]
#   --install  apt-get install the missing packages (as root)
#   --keep     keep the work dir (default /var/tmp/tessera-moosefs; kept on failure)
#   --quick    smoke test: tiny tree (-b 2 -z 2 -I 4), 1 round
# Needs root. Prints machine facts and a markdown table of the median ops/s per
# phase and target, and the ratios redis/sqlite and redis/moosefs, on stdout.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
ROUNDS=2 PROCS=1 TESSERA=$REPO/build/src/tessera WORK=/var/tmp/tessera-moosefs
INSTALL=0 KEEP=0 QUICK=0 SETTLE=1.5 TREE=(-b 6 -z 4 -I 8)
ADDR=10.254.0.1 IFACE=tmfs0 PEER=tmfs1 MFS_PORT=19420  # 19419-19422 on $ADDR

log() { printf '%s moosefs_md: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n 2,20p "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --procs) PROCS=${2:?}; shift 2 ;;
    --tessera) TESSERA=${2:?}; shift 2 ;;
    --work) WORK=${2:?}; shift 2 ;;
    --install) INSTALL=1; shift ;;
    --keep) KEEP=1; shift ;;
    --quick) QUICK=1; shift ;;
    -h|--help) usage 0 ;;
    *) log "unknown option $1"; usage 2 >&2 ;;
  esac
done
[ "$QUICK" = 1 ] && { ROUNDS=1; TREE=(-b 2 -z 2 -I 4); }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds wants a positive integer"
[[ $PROCS =~ ^[1-9][0-9]*$ ]] || die "--procs wants a positive integer"
[ "$(id -u)" = 0 ] || die "needs root (FUSE mounts, a network interface, the mfs user)"
[ -x "$TESSERA" ] || die "no tessera binary at $TESSERA (--tessera BIN)"

# --- packages ----------------------------------------------------------------
missing=()
for pair in mfsmaster:moosefs-master mfschunkserver:moosefs-chunkserver \
            mfsmount:moosefs-client redis-server:redis-server redis-cli:redis-tools \
            gcc:gcc python3:python3 ip:iproute2 ss:iproute2; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  [ "$INSTALL" = 1 ] || die "missing packages: ${missing[*]} (apt-get install ${missing[*]}, or rerun with --install)"
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2 || die "apt-get install failed"
fi
[ -f /var/lib/mfs/metadata.mfs.empty ] || die "no /var/lib/mfs/metadata.mfs.empty (moosefs-master broken?)"
getent passwd mfs >/dev/null || die "no mfs user (moosefs-common should create it)"

# --- work dir, cleanup ---------------------------------------------------------
if [ -e "$WORK" ]; then
  [ -f "$WORK/.moosefs_md" ] || die "$WORK exists and is not ours: remove it or use --work"
  grep -q " $WORK/" /proc/mounts && die "something is still mounted under $WORK"
  rm -rf "$WORK"
fi
ip link show "$IFACE" >/dev/null 2>&1 && die "interface $IFACE exists (a killed run?): ip link del $IFACE"
ip -o addr show | grep -q " $ADDR/" && die "address $ADDR is already in use on this machine"
mkdir -p "$WORK/mnt" && touch "$WORK/.moosefs_md"
MNT=$WORK/mnt LOG=$WORK/log MFS=$WORK/mfs T=$WORK/tessera MFSMOUNT_PID=
mfs_stop() {  # idempotent; each waits for its daemon to end
  [ -f "$MFS/cs/.mfschunkserver.lock" ] && mfschunkserver -c "$MFS/cs.cfg" stop && rm "$MFS/cs/.mfschunkserver.lock"
  [ -f "$MFS/master/.mfsmaster.lock" ] && mfsmaster -c "$MFS/master.cfg" stop && rm "$MFS/master/.mfsmaster.lock"
  return 0
}
cleanup() {
  local rc=$?
  set +e
  {
    if mountpoint -q "$MNT"; then
      if [ -n "$MFSMOUNT_PID" ]; then umount "$MNT" || umount -l "$MNT"
      else "$T" umount "$MNT" || umount -l "$MNT"; fi
    fi
    [ -n "$MFSMOUNT_PID" ] && wait "$MFSMOUNT_PID"
    mfs_stop
    [ -d "$WORK/redis" ] && bash "$REPO/tests/tools/redis-server.sh" stop "$WORK/redis"
    ip link show "$IFACE" && ip link del "$IFACE"
  } >>"$LOG" 2>&1
  if [ "$KEEP" = 1 ] || [ "$rc" != 0 ]; then log "work dir kept: $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cp "$TESSERA" "$T"  # a rebuild during the run does not matter
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$WORK/mdbench" || die "mdbench does not compile"

# --- MooseFS: address, configs, start/stop -----------------------------------
# The chunkserver refuses a master on 127.0.0.0/8. No dummy interfaces on every
# kernel; a veth pair (both ends here) gives a local non-loopback address.
ip link add "$IFACE" type veth peer name "$PEER" || die "cannot create veth $IFACE"
{ ip addr add "$ADDR/24" dev "$IFACE" && ip link set "$IFACE" up && ip link set "$PEER" up; } \
  || die "cannot set up $ADDR on $IFACE"
mkdir -p "$MFS"
echo "$ADDR/24 / rw,alldirs,maproot=0:0" >"$MFS/exports.cfg"
echo "$MFS/hdd" >"$MFS/hdd.cfg"
cat >"$MFS/master.cfg" <<EOF
DATA_PATH = $MFS/master
EXPORTS_FILENAME = $MFS/exports.cfg
TOPOLOGY_FILENAME = $MFS/topology.cfg
NICE_LEVEL = 0
MATOML_LISTEN_HOST = $ADDR
MATOML_LISTEN_PORT = $((MFS_PORT - 1))
MATOCS_LISTEN_HOST = $ADDR
MATOCS_LISTEN_PORT = $MFS_PORT
MATOCL_LISTEN_HOST = $ADDR
MATOCL_LISTEN_PORT = $((MFS_PORT + 1))
EOF
cat >"$MFS/cs.cfg" <<EOF
DATA_PATH = $MFS/cs
HDD_CONF_FILENAME = $MFS/hdd.cfg
NICE_LEVEL = 0
BIND_HOST = $ADDR
MASTER_HOST = $ADDR
MASTER_PORT = $MFS_PORT
CSSERV_LISTEN_HOST = $ADDR
CSSERV_LISTEN_PORT = $((MFS_PORT + 2))
EOF
mfs_start() {  # fresh metadata and chunk store
  rm -rf "$MFS/master" "$MFS/cs" "$MFS/hdd" && mkdir -p "$MFS/master" "$MFS/cs" "$MFS/hdd"
  cp /var/lib/mfs/metadata.mfs.empty "$MFS/master/metadata.mfs"
  chown -R mfs:mfs "$MFS/master" "$MFS/cs" "$MFS/hdd"
  mfsmaster -c "$MFS/master.cfg" start >>"$LOG" 2>&1 || die "mfsmaster did not start (see $LOG)"
  mfschunkserver -c "$MFS/cs.cfg" start >>"$LOG" 2>&1 || die "mfschunkserver did not start (see $LOG)"
  for _ in $(seq 1 100); do  # until the chunkserver is connected to the master
    [ -n "$(ss -Htn state established "( dport = :$MFS_PORT )")" ] && return 0
    sleep 0.1
  done
  die "the chunkserver did not connect to the master at $ADDR:$MFS_PORT (see $LOG)"
}

# --- redis ---------------------------------------------------------------------
bash "$REPO/tests/tools/redis-server.sh" start "$WORK/redis" >>"$LOG" 2>&1 || die "redis-server did not start (see $LOG)"
# shellcheck disable=SC1091
source "$WORK/redis/env"
REDIS_URL=$TESSERA_TEST_REDIS_URL

# --- one target, one round -----------------------------------------------------
mdbench() {  # tag
  "$WORK/mdbench" -d "$MNT/md" "${TREE[@]}" -P "$PROCS" -S "$SETTLE" -t "$1" >>"$WORK/results" \
    || die "mdbench failed on $1"
}
tessera_run() {  # tag meta-url
  rm -rf "$WORK/bucket" "$WORK/meta.db"
  "$T" format "$2" mdbench --bucket "$WORK/bucket" >>"$LOG" 2>&1 || die "tessera format $2 failed (see $LOG)"
  "$T" mount "$2" "$MNT" -d --log "$WORK/mount.log" >>"$LOG" 2>&1 || die "tessera mount failed (see $WORK/mount.log)"
  mdbench "$1"
  "$T" umount "$MNT" >>"$LOG" 2>&1 || die "tessera umount failed"
}
run() {  # target
  log "round $round: $1"
  case $1 in
    tessera-sqlite) tessera_run "$1" "sqlite3://$WORK/meta.db" ;;
    tessera-redis)
      redis-cli -u "$REDIS_URL" flushall >/dev/null || die "redis flushall failed"
      tessera_run "$1" "$REDIS_URL" ;;
    moosefs)
      mfs_start
      mfsmount -f "$MNT" -H "$ADDR" -P "$((MFS_PORT + 1))" >>"$LOG" 2>&1 &
      MFSMOUNT_PID=$!
      for _ in $(seq 1 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
      mountpoint -q "$MNT" || die "mfsmount did not mount (see $LOG)"
      mdbench "$1"
      umount "$MNT" || die "umount of the MooseFS mount failed"
      wait "$MFSMOUNT_PID" || true; MFSMOUNT_PID=
      mfs_stop >>"$LOG" 2>&1 ;;
  esac
}

TARGETS=(tessera-sqlite tessera-redis moosefs)
log "work dir $WORK, $ROUNDS round(s), $PROCS process(es), mdbench ${TREE[*]} -S $SETTLE"
for round in $(seq 1 "$ROUNDS"); do
  for i in 0 1 2; do run "${TARGETS[$(((round - 1 + i) % 3))]}"; done
done

# --- report ------------------------------------------------------------------------
echo "## MooseFS vs Tessera, mdbench ${TREE[*]} -P $PROCS -S $SETTLE, $ROUNDS round(s)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), kernel $(uname -r)"
echo "- tessera: $("$T" --version | sed 's/^tessera version //')"
echo "- MooseFS: $(mfsmaster -v 2>&1 | sed -n 's/^version: //p') (master, chunkserver at $ADDR, mfsmount defaults)"
echo "- redis: $(redis-server --version | grep -o 'v=[^ ]*')"
echo
python3 - "$WORK/results" "${TARGETS[@]}" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"result tag=(\S+) .*phase=(\S+) .*ops_per_sec=([\d.]+)", line)
    if m:
        runs.setdefault(m.group(2), {}).setdefault(m.group(1), []).append(float(m.group(3)))
sq, rd, mf = sys.argv[2:5]
print(f"| phase (ops/s, median) | {sq} | {rd} | {mf} | redis/sqlite | redis/moosefs |")
print("|---|---:|---:|---:|---:|---:|")
def ratio(a, b): return f"{a / b:.2f}" if b else "-"
for phase, by in runs.items():
    s, r, m = (statistics.median(by.get(t, [0])) for t in (sq, rd, mf))
    print(f"| {phase} | {s:,.0f} | {r:,.0f} | {m:,.0f} | {ratio(r, s)} | {ratio(r, m)} |")
PY
