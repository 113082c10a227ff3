#!/usr/bin/env bash
# bench/redis_fcall_cost.sh — where the time of one Tessera function call
# goes inside Redis. On a private redis-server (tests/tools/redis-server.sh:
# loopback TCP, AOF everysec) with a formatted volume, it loads Tessera's
# function library a second time under the name "probe" with a few probe
# functions added, and times each call with redis-benchmark (1 client,
# Redis's own accounting: INFO commandstats, microseconds per FCALL):
#   lone_nop      a function returning {0}, in a library of its own, before
#                 Tessera's library is loaded
#   nop_ro        the same function registered through Tessera's `wrap`
#                 (read-only: no operation record)
#   nop_rw        a state-changing no-op: `wrap` writes the operation record
#                 and checks for watchers (what every mutation pays)
#   lookup        tessera_lookup of "." in the root (2 GETs)
#   mknod         tessera_mknod of a new empty file in the root
# then lone_nop again: every library shares one Lua VM, so its garbage
# collector's work grows with all of them. Each state-changing call gets an
# operation record key of its own (a random one: a number already recorded
# under a key would answer from the record without running).
#
# usage: bench/redis_fcall_cost.sh [--rounds 3] [--calls 10000] [--tessera BIN] [--source DIR]
#   --source DIR  the tree whose src/meta/redis_functions*.lua is probed
#                 (default: this one), e.g. a worktree of an older commit
# Prints a markdown table: median and range of microseconds per call.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")
ROUNDS=3 CALLS=10000 TESSERA=$REPO/build/src/tessera SOURCE=$REPO
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --calls) CALLS=$2; shift 2 ;;
    --tessera) TESSERA=$2; shift 2 ;;
    --source) SOURCE=$(realpath "$2"); shift 2 ;;
    -h | --help) sed -n 2,22p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v redis-benchmark >/dev/null || { echo "redis_fcall_cost: needs redis-benchmark (redis-tools)" >&2; exit 2; }
[ -n "${TESSERA_TEST_REDIS_URL:-}" ] ||
  exec bash "$REPO/tests/tools/with-redis.sh" bash "$0" --rounds "$ROUNDS" --calls "$CALLS" --tessera "$TESSERA" \
    --source "$SOURCE"

PORT=${TESSERA_TEST_REDIS_URL#redis://127.0.0.1:} PORT=${PORT%%/*}
WORK=$(mktemp -d /dev/shm/tessera-fcall-cost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cli() { redis-cli -p "$PORT" "$@"; }
"$TESSERA" format --bucket "$WORK/bucket" "${TESSERA_TEST_REDIS_URL%/*}/0" fcallcost >/dev/null

cat >"$WORK/lone.lua" <<'EOF'
#!lua name=lone
redis.register_function{function_name = 'lone_nop', callback = function() return { 0 } end, flags = { 'no-writes' }}
EOF
{
  sed "1s/.*/#!lua name=probe/; s/function_name = 'tessera_'/function_name = 'probe_'/" \
    "$SOURCE/src/meta/redis_functions.lua" "$SOURCE/src/meta/redis_functions_ns.lua" \
    "$SOURCE/src/meta/redis_functions_admin.lua" |
    sed '2,${/^#!lua/d}'
  echo "register('nop_ro', function(args) return { 0 } end, true)"
  echo "register('nop_rw', function(args) return { 0 } end)"
} >"$WORK/probe.lua"

# usec per call of FCALL ARGS..., by Redis's accounting over $CALLS calls.
usec() {
  cli config resetstat >/dev/null
  redis-benchmark -p "$PORT" -n "$CALLS" -c 1 -r 1000000000 "$@" >/dev/null 2>&1
  cli info commandstats | sed -n 's/^cmdstat_fcall:.*usec_per_call=\([0-9.]*\).*/\1/p'
}
NOW=$(date +%s)
declare -A vals
for round in $(seq "$ROUNDS"); do
  cli function delete probe >/dev/null 2>&1 || true
  cli -x function load replace <"$WORK/lone.lua" >/dev/null
  vals[lone_nop]+=" $(usec FCALL lone_nop 0)"
  cli -x function load replace <"$WORK/probe.lua" >/dev/null
  vals[nop_ro]+=" $(usec FCALL probe_nop_ro 0)"
  vals[nop_rw]+=" $(usec FCALL probe_nop_rw 2 "obench.__rand_int__" 1)"
  vals[lookup]+=" $(usec FCALL probe_lookup 0 0 0 "" 1 .)"
  # uid gid gids now_sec now_nsec sid parent name ino type perm rdev target inode_limit
  vals[mknod]+=" $(usec FCALL probe_mknod 2 "obench.__rand_int__" 1 0 0 "" "$NOW" 0 1 "r$round.__rand_int__" \
    __rand_int__ 32768 420 0 "" 0)"
  vals[lone_nop_after]+=" $(usec FCALL lone_nop 0)"
done
echo "Redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-), $(nproc) CPUs, $CALLS calls per figure, $ROUNDS rounds"
echo
echo "| call | µs per call (median) | range |"
echo "|---|---:|---|"
for k in lone_nop nop_ro nop_rw lookup mknod lone_nop_after; do
  tr ' ' '\n' <<<"${vals[$k]}" | grep -v '^$' | sort -g |
    awk -v k="$k" '{a[NR] = $1} END {m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
      printf "| %s | %.1f | %.1f–%.1f |\n", k, m, a[1], a[NR]}'
done
