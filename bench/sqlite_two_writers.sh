#!/usr/bin/env bash
# bench/sqlite_two_writers.sh — two mounts of one SQLite volume on this host,
# each creating and removing files as fast as it can at the same time: how
# many operations each gets through and its worst wait, i.e. whether one
# mount's writers can starve the other's of SQLite's single write lock
# (with --commit-delay a mount holds that lock up to the delay at a time).
# usage: bench/sqlite_two_writers.sh TESSERA [--opts "mount options"] [--seconds 10] [--rounds 2]
# Prints one line per mount per round: ops, ops/s, p50/p99/max latency (ms), errors.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,8p "$0"; exit 2; }
BIN=$(realpath "$1"); shift
OPTS="" SECONDS_RUN=10 ROUNDS=2
while [ $# -gt 0 ]; do
  case $1 in
    --opts) OPTS=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/tessera-2w.XXXXXX")
cleanup() {
  for m in a b; do mountpoint -q "$WORK/$m" && { "$BIN" umount "$WORK/$m" || umount -l "$WORK/$m"; }; done
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/a" "$WORK/b"
cat >"$WORK/load.py" <<'PY'
import os, sys, time
root, seconds, tag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
os.makedirs(root, exist_ok=True)
lat, errors, n = [], 0, 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    path = f"{root}/f{n}"
    t0 = time.perf_counter()
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        os.unlink(path)
    except OSError:
        errors += 1
    lat.append(time.perf_counter() - t0)
    n += 1
lat.sort()
pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
print(f"{tag}: {n} create+close+unlink, {n / seconds:.0f}/s, p50 {pick(0.5):.2f} ms, "
      f"p99 {pick(0.99):.2f} ms, max {lat[-1] * 1000:.1f} ms, errors {errors}")
PY
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$WORK/vol" && mkdir -p "$WORK/vol"
  "$BIN" format "sqlite3://$WORK/vol/meta.db" twow --bucket "$WORK/vol/bucket" >/dev/null 2>&1
  for m in a b; do
    # shellcheck disable=SC2086
    "$BIN" mount "sqlite3://$WORK/vol/meta.db" "$WORK/$m" -d --log "$WORK/vol/$m.log" $OPTS >/dev/null 2>&1
  done
  python3 "$WORK/load.py" "$WORK/a/da" "$SECONDS_RUN" "round $r mount a" &
  pa=$!
  python3 "$WORK/load.py" "$WORK/b/db" "$SECONDS_RUN" "round $r mount b" &
  pb=$!
  wait "$pa" "$pb"
  for m in a b; do "$BIN" umount "$WORK/$m" >/dev/null; done
done
