#!/usr/bin/env bash
# bench/summary_bench.sh — `tessera summary` of a tree of FILES files (1,000
# per directory; bench/gen_dump.py loaded into SQLite with `tessera load`,
# which derives the directory statistics), next to `du -s` of the same tree
# through the mount, in one run. The files have slices but the bucket is
# empty: neither command reads data.
#
# usage: bench/summary_bench.sh [--files 1000000] [--runs 5] [TESSERA]
# Prints a markdown table on stdout.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
FILES=1000000
RUNS=5
while [ $# -gt 0 ]; do
  case $1 in
    --files) FILES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) break ;;
  esac
done
T=$(realpath "${1:-$REPO/build/src/tessera}")
WORK=$(mktemp -d /var/tmp/tessera-summarybench.XXXXXX)
cleanup() {
  "$T" umount "$WORK/mnt" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt" "$WORK/bucket"
python3 "$BENCH/gen_dump.py" "$FILES" "$WORK/bucket" >"$WORK/dump.json"
load_start=$(date +%s.%N)
"$T" load "sqlite3://$WORK/meta.db" "$WORK/dump.json" >/dev/null 2>&1
load_s=$(echo "$(date +%s.%N) - $load_start" | bc)
"$T" mount "sqlite3://$WORK/meta.db" "$WORK/mnt" -d --log "$WORK/mount.log" >/dev/null 2>&1

# Best and median of RUNS runs of a command, in seconds.
timed() {
  local times=()
  for _ in $(seq "$RUNS"); do
    local s e
    s=$(date +%s.%N)
    "$@" >"$WORK/out" 2>&1 || { cat "$WORK/out" >&2; exit 1; }
    e=$(date +%s.%N)
    times+=("$(echo "$e - $s" | bc)")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f | %.3f", a[1], a[int((NR+1)/2)]}'
}
echo "Tree: $FILES files in $(( (FILES + 999) / 1000 )) directories, SQLite, loaded in ${load_s} s; $(nproc) cores, $(date -u +%F)."
echo
echo "| command | best s | median s |"
echo "|---|---:|---:|"
echo "| tessera summary MNT --depth 1 | $(timed "$T" summary "$WORK/mnt" --depth 1) |"
grep -q "$FILES" "$WORK/out" || { echo "summary does not count $FILES files:" >&2; cat "$WORK/out" >&2; exit 1; }
echo "| tessera info -r MNT | $(timed "$T" info -r "$WORK/mnt") |"
RUNS_DU=$RUNS
RUNS=1  # du walks every file through FUSE: once is enough
echo "| du -s MNT (first, cold kernel caches) | $(timed du -s "$WORK/mnt") |"
echo "| du -s MNT (second) | $(timed du -s "$WORK/mnt") |"
RUNS=$RUNS_DU
