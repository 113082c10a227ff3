#!/usr/bin/env bash
# bench/cpu_placement.sh — how much of a metadata operation through FUSE is the
# hand-off between CPUs. mdbench (flat: -n ITEMS, 1 process, empty files) on
# Tessera (fresh SQLite + local-directory volume) and on libfuse's
# passthrough_hp, all on tmpfs, with the daemon and the benchmark placed three
# ways by CPU affinity (taskset):
#   free      no affinity (what users get)
#   apart     daemon on the last CPU, benchmark on CPU 0
#   together  daemon and benchmark on the last CPU
# Each FUSE request wakes a daemon thread, and its reply wakes the caller; on
# a virtual machine a wake-up on another, idle CPU costs an inter-processor
# interrupt and the idle CPU's exit, which a wake-up on the same CPU does not.
# Rounds rotate over targets and placements; prints medians of µs per
# operation and Tessera / passthrough_hp per placement.
# usage: bench/cpu_placement.sh [--tessera BIN] [--hp BIN] [--rounds 3] [--items 4000]
#        (--hp: default, compiled from the passthrough_hp source bench/run_all.sh caches)
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESSERA=$BENCH/../build/src/tessera HP="" ROUNDS=3 ITEMS=4000
while [ $# -gt 0 ]; do
  case $1 in
    --tessera) TESSERA=$2; shift 2 ;;
    --hp) HP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --items) ITEMS=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts with allow_other)" >&2; exit 1; }
NCPU=$(nproc)
[ "$NCPU" -ge 2 ] || { echo "needs at least 2 CPUs" >&2; exit 1; }
LAST=$((NCPU - 1))
W=$(mktemp -d /dev/shm/tessera-placement.XXXXXX)
PIDS=()
cleanup() {
  for m in "$W"/*-mnt; do mountpoint -q "$m" 2>/dev/null && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; }; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/bin"
cp "$(realpath "$TESSERA")" "$W/bin/tessera"
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$W/bin/mdbench"
if [ -z "$HP" ]; then
  cache="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/tessera-bench"
  src=$(find "$cache" -maxdepth 2 -type d -path '*/fuse-*/example' 2>/dev/null | head -1)
  [ -n "$src" ] || { echo "no passthrough_hp source in $cache: run bench/run_all.sh --targets passthrough-hp once, or pass --hp" >&2; exit 1; }
  # shellcheck disable=SC2046
  g++ -std=c++17 -O2 -I"$src" "$src/passthrough_hp.cc" $(pkg-config fuse3 --cflags --libs) -lpthread -o "$W/bin/passthrough_hp"
  HP=$W/bin/passthrough_hp
fi

wait_mounted() {  # MOUNTPOINT PID
  for _ in $(seq 100); do
    mountpoint -q "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
declare -A DPID
mkdir -p "$W/hp-src" "$W/hp-mnt" "$W/tessera/bucket" "$W/tessera-mnt"
"$HP" --foreground "$W/hp-src" "$W/hp-mnt" >"$W/hp.log" 2>&1 &
DPID[hp]=$!
PIDS+=("${DPID[hp]}")
wait_mounted "$W/hp-mnt" "${DPID[hp]}" || { cat "$W/hp.log" >&2; exit 1; }
"$W/bin/tessera" format "sqlite3://$W/tessera/meta.db" placement --bucket "$W/tessera/bucket" >/dev/null
"$W/bin/tessera" mount "sqlite3://$W/tessera/meta.db" "$W/tessera-mnt" -d --log "$W/tessera.log" >/dev/null
DPID[tessera]=$(pgrep -f "mount sqlite3://$W/tessera/meta.db" | head -1)

all=$(printf '0-%d' "$LAST")
run() {  # TARGET PLACEMENT ROUND
  local t=$1 p=$2 dir daemon_cpus client_cpus
  dir=$W/$t-mnt/r$3-$p
  case $p in
    free) daemon_cpus=$all client_cpus=$all ;;
    apart) daemon_cpus=$LAST client_cpus=0 ;;
    together) daemon_cpus=$LAST client_cpus=$LAST ;;
  esac
  taskset -a -p -c "$daemon_cpus" "${DPID[$t]}" >/dev/null
  taskset -c "$client_cpus" "$W/bin/mdbench" -d "$dir" -n "$ITEMS" -t "$t/$p" >>"$W/results"
  rm -rf "$dir"
  taskset -a -p -c "$all" "${DPID[$t]}" >/dev/null
}
placements=(free apart together)
targets=(tessera hp)
for r in $(seq 1 "$ROUNDS"); do
  for i in 0 1 2; do
    p=${placements[$(((i + r) % 3))]}
    for j in 0 1; do run "${targets[$(((j + r + i) % 2))]}" "$p" "$r"; done
  done
done
python3 - "$W/results" "$ITEMS" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"result tag=(\S+)/(\S+) .*phase=(\S+) .*ops_per_sec=([\d.]+)", line)
    if m:
        runs.setdefault((m.group(1), m.group(2), m.group(3)), []).append(1e6 / float(m.group(4)))
phases = ["dir_create", "dir_remove", "file_create", "file_remove", "file_stat"]
print("| phase (µs per operation, median) | placement | passthrough_hp | Tessera | Tessera / passthrough_hp (ops/s) |")
print("|---|---|---:|---:|---:|")
for ph in phases:
    for p in ["free", "apart", "together"]:
        h = statistics.median(runs[("hp", p, ph)])
        t = statistics.median(runs[("tessera", p, ph)])
        print(f"| {ph} | {p} | {h:.1f} | {t:.1f} | {h / t:.2f} |")
PY
