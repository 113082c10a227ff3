#!/usr/bin/env bash
# bench/md_ab.sh — the metadata workload (bench/mdbench.c, mdtest shape of the
# JuiceFS seed: -b 6 -z 4 -I 8, 1 process, empty files) on two tessera
# binaries or mount option sets, A and B, in alternating rounds in one run,
# one mount of a fresh SQLite + local-directory volume each time (under
# /var/tmp). The pause before the stat and read phases (--settle, default
# 1.5 s, as bench/run_all.sh) lets 1 s kernel caches expire.
# usage: bench/md_ab.sh A_TESSERA B_TESSERA [--a-opts "..."] [--b-opts "..."] [--rounds 3] [--settle 1.5]
#        [--procs 1] (processes, each in its own tree: mdbench -P)
# Prints a markdown table of the medians per phase and B/A.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 2 ] || { sed -n 2,10p "$0"; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); shift 2
A_OPTS="" B_OPTS="" ROUNDS=3 SETTLE=1.5 PROCS=1
while [ $# -gt 0 ]; do
  case $1 in
    --a-opts) A_OPTS=$2; shift 2 ;;
    --b-opts) B_OPTS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --settle) SETTLE=$2; shift 2 ;;
    --procs) PROCS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d /var/tmp/tessera-mdab.XXXXXX)
cleanup() {
  mountpoint -q "$WORK/mnt" && { "$A" umount "$WORK/mnt" || umount -l "$WORK/mnt"; }
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$WORK/mdbench"
mkdir -p "$WORK/mnt"
one() {  # tag binary opts
  rm -rf "$WORK/vol" && mkdir -p "$WORK/vol"
  "$2" format "sqlite3://$WORK/vol/meta.db" mdab --bucket "$WORK/vol/bucket" >/dev/null 2>&1
  # shellcheck disable=SC2086
  "$2" mount "sqlite3://$WORK/vol/meta.db" "$WORK/mnt" -d --log "$WORK/vol/log" $3 >/dev/null 2>&1
  "$WORK/mdbench" -d "$WORK/mnt/md" -b 6 -z 4 -I 8 -P "$PROCS" -S "$SETTLE" -t "$1" >>"$WORK/results"
  "$2" umount "$WORK/mnt" >/dev/null
}
for _ in $(seq 1 "$ROUNDS"); do
  one A "$A" "$A_OPTS"
  one B "$B" "$B_OPTS"
done
python3 - "$WORK/results" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"result tag=(\S+) .*phase=(\S+) .*ops_per_sec=([\d.]+)", line)
    if m:
        runs.setdefault((m.group(1), m.group(2)), []).append(float(m.group(3)))
phases = [p for t, p in runs if t == "A"]
print("| phase (ops/s, median) | A | B | B/A |")
print("|---|---:|---:|---:|")
for p in dict.fromkeys(phases):
    a, b = statistics.median(runs[("A", p)]), statistics.median(runs[("B", p)])
    print(f"| {p} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
PY
