#!/usr/bin/env bash
# bench/coherent_bench.sh — coherent kernel caches between two mounts of one
# volume (docs/consistency.md), with coherence on (the default,
# --coherent-cache 300) and off (--coherent-cache 0: 1 s kernel caches),
# back to back in one run, on SQLite (two mounts of one database file) and
# on Redis (a private redis-server on loopback, tests/tools/redis-server.sh):
#  - stat of an unchanged tree through mount 2 (FILES files, cached by a
#    first pass, then ROUNDS passes each after a 1.5 s pause): stats/s and
#    the engine requests (lookup + getattr) the passes cost mount 2;
#  - how long a change through mount 1 (chmod, create, unlink, rename)
#    takes to show through mount 2, which has the old state cached:
#    median and worst of 20 each.
# usage: bench/coherent_bench.sh TESSERA [--files 2000] [--rounds 3] [--engines "sqlite redis"]
# Prints a markdown table.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOLS=$(dirname "$BENCH")/tests/tools
[ $# -ge 1 ] || { sed -n 2,16p "$0"; exit 2; }
T=$(realpath "$1"); shift
FILES=2000
ROUNDS=3
ENGINES="sqlite redis"
while [ $# -gt 0 ]; do
  case $1 in
    --files) FILES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d /var/tmp/tessera-cbench.XXXXXX)
REDIS_DIR=
cleanup() {
  for m in "$WORK"/m1 "$WORK"/m2; do mountpoint -q "$m" && { "$T" umount "$m" || umount -l "$m"; }; done
  [ -n "$REDIS_DIR" ] && bash "$TOOLS/redis-server.sh" stop "$REDIS_DIR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/m1" "$WORK/m2"

run() {  # engine, mode (on|off)
  local engine=$1 mode=$2 meta opts=()
  [ "$mode" = off ] && opts=(--coherent-cache 0)
  case $engine in
    sqlite) rm -f "$WORK"/meta.db*; meta="sqlite3://$WORK/meta.db" ;;
    redis) meta="$REDIS_URL"; redis-cli -u "$REDIS_URL" FLUSHALL >/dev/null ;;
  esac
  rm -rf "$WORK/bucket"
  "$T" format "$meta" cbench --bucket "$WORK/bucket" --trash-days 0 >/dev/null 2>&1
  "$T" mount "$meta" "$WORK/m1" -d --log "$WORK/m1.log" "${opts[@]}" >/dev/null 2>&1
  "$T" mount "$meta" "$WORK/m2" -d --log "$WORK/m2.log" "${opts[@]}" >/dev/null 2>&1
  python3 - "$WORK/m1" "$WORK/m2" "$FILES" "$ROUNDS" "$engine" "$mode" <<'PY'
import os, statistics, sys, time
a, b, files, rounds, engine, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
def engine_lookups():
    n = 0
    for line in open(b + "/.stats"):
        if line.startswith("tessera_meta_op_duration_seconds_count") and ('op="lookup"' in line or 'op="getattr"' in line):
            n += int(float(line.split()[-1]))
    return n
os.makedirs(a + "/t")
for i in range(files):
    open(f"{a}/t/f{i}", "w").close()
time.sleep(5.5)  # PostgreSQL: a new watcher keeps short timeouts for 5 s (others look once a second)
for i in range(files):
    os.stat(f"{b}/t/f{i}")  # mount 2 caches the tree
rates, asked = [], 0
for _ in range(rounds):
    time.sleep(1.5)  # past 1 s kernel caches
    s0 = engine_lookups(); s1 = engine_lookups(); reading = s1 - s0
    t = time.time()
    for i in range(files):
        os.stat(f"{b}/t/f{i}")
    rates.append(files / (time.time() - t))
    asked += engine_lookups() - s1 - reading
lat = {}
def seen(what, cond):
    t = time.time()
    while not cond():
        if time.time() - t > 5: break
        time.sleep(0.0005)
    lat.setdefault(what, []).append(time.time() - t)
for i in range(20):
    f = f"{a}/t/f{i}"
    os.stat(f"{b}/t/f{i}"); mode_bits = 0o600 if i % 2 else 0o640
    os.chmod(f, mode_bits)
    seen("chmod", lambda: os.stat(f"{b}/t/f{i}").st_mode & 0o777 == mode_bits)
    os.path.exists(f"{b}/t/g{i}")
    open(f"{a}/t/g{i}", "w").close()
    seen("create", lambda: os.path.exists(f"{b}/t/g{i}"))
    os.stat(f"{b}/t/g{i}")
    os.rename(f"{a}/t/g{i}", f"{a}/t/h{i}")
    seen("rename", lambda: os.path.exists(f"{b}/t/h{i}") and not os.path.exists(f"{b}/t/g{i}"))
    os.stat(f"{b}/t/h{i}")
    os.unlink(f"{a}/t/h{i}")
    seen("unlink", lambda: not os.path.exists(f"{b}/t/h{i}"))
cells = " | ".join("%.0f / %.0f ms" % (1000 * statistics.median(v), 1000 * max(v)) for v in (lat[k] for k in ("chmod", "create", "rename", "unlink")))
print(f"| {engine} | {mode} | {statistics.median(rates):,.0f} | {asked} | {cells} |")
PY
  "$T" umount "$WORK/m1" >/dev/null; "$T" umount "$WORK/m2" >/dev/null
}

echo "| engine | coherent | stat of an unchanged tree, mount 2 (stats/s, median) | engine requests for $((FILES * ROUNDS)) stats | chmod seen (median / worst) | create | rename | unlink |"
echo "|---|---|---:|---:|---|---|---|---|"
for engine in $ENGINES; do
  if [ "$engine" = redis ] && [ -z "$REDIS_DIR" ]; then
    REDIS_DIR=$(mktemp -d /var/tmp/tessera-cbench-redis.XXXXXX)
    bash "$TOOLS/redis-server.sh" start "$REDIS_DIR" >/dev/null
    # shellcheck disable=SC1091
    source "$REDIS_DIR/env"
    REDIS_URL=$TESSERA_TEST_REDIS_URL
  fi
  run "$engine" on
  run "$engine" off
done
