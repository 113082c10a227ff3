#!/usr/bin/env bash
# bench/rmr_bench.sh — `tessera rmr` next to `rm -rf` on the same tree of
# FILES empty files (10 directories) in one mount of a fresh SQLite volume
# (trash off), alternating, in one run; then the time until the background
# cleanup has reclaimed every removed inode is the same for both.
#
# usage: bench/rmr_bench.sh [--files 100000] [--rounds 2] [TESSERA]
# Prints a markdown table on stdout.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
FILES=100000
ROUNDS=2
while [ $# -gt 0 ]; do
  case $1 in
    --files) FILES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) break ;;
  esac
done
T=$(realpath "${1:-$REPO/build/src/tessera}")
WORK=$(mktemp -d /var/tmp/tessera-rmrbench.XXXXXX)
cleanup() {
  mountpoint -q "$WORK/mnt" && { "$T" umount "$WORK/mnt" || umount -l "$WORK/mnt"; }
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt"
"$T" format "sqlite3://$WORK/meta.db" rmrbench --bucket "$WORK/bucket" --trash-days 0 >/dev/null 2>&1
"$T" mount "sqlite3://$WORK/meta.db" "$WORK/mnt" -d --log "$WORK/mount.log" >/dev/null 2>&1
make_tree() {
  python3 - "$1" "$FILES" <<'PY'
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
for d in range(10):
    sub = os.path.join(top, "d%d" % d)
    os.makedirs(sub)
    for i in range(n // 10):
        os.close(os.open(os.path.join(sub, "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
PY
}
secs() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
echo "$FILES files in 10 directories, SQLite, trash off, one mount (default caches); $(nproc) cores, $(date -u '+%F %H:%M') UTC."
echo
echo "| round | rm -rf s | tessera rmr s | rm -rf / rmr |"
echo "|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  make_tree "$WORK/mnt/t"
  a=$(secs rm -rf "$WORK/mnt/t")
  [ ! -e "$WORK/mnt/t" ] || { echo "rm -rf left the tree" >&2; exit 1; }
  make_tree "$WORK/mnt/t"
  b=$(secs "$T" rmr "$WORK/mnt/t")
  [ ! -e "$WORK/mnt/t" ] || { echo "rmr left the tree" >&2; exit 1; }
  echo "| $r | $a | $b | $(echo "scale=1; $a / $b" | bc) |"
done
