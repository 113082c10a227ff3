#!/usr/bin/env bash
# bench/redis_fcall_ab.sh — what the Redis functions cost per operation, two
# tessera binaries side by side: each gets a private redis-server (AOF
# everysec, like the test servers) and a fresh volume (trash on), and
# `tessera bench-meta` runs on both AT THE SAME TIME, so that other tenants'
# load slows both alike. Per side and round it prints the rates of the
# mutating phases, Redis's own accounting of the function calls (INFO
# commandstats: calls and microseconds per FCALL) and the number of commands
# Redis ran in all (FCALLs and the commands they made). The command count
# does not depend on the machine's load: the same calls making fewer
# commands is a cut that holds however noisy the rates are.
#
# usage: bench/redis_fcall_ab.sh BEFORE AFTER [--rounds 3] [--count 5000]
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,13p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BEFORE=$(realpath "$1"); AFTER=$(realpath "$2"); shift 2
ROUNDS=3 COUNT=5000
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v redis-server >/dev/null || { echo "redis_fcall_ab: needs redis-server and redis-cli" >&2; exit 2; }
WORK=$(mktemp -d /dev/shm/tessera-fcall.XXXXXX)
PORTS=(6481 6482)
cleanup() {
  for p in "${PORTS[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

side() {  # side BIN PORT NAME ROUND: one bench-meta run on a fresh server
  local bin=$1 port=$2 name=$3 round=$4 dir=$WORK/$3-$4 url
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly yes --appendfsync everysec \
    --daemonize yes --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  url=redis://127.0.0.1:$port/1
  "$bin" format "$url" "fcall-$name" --bucket "$dir/bucket" --trash-days 1 >/dev/null 2>&1
  redis-cli -p "$port" config resetstat >/dev/null
  "$bin" bench-meta "$url" --count "$COUNT" >"$dir/bench.txt" 2>&1
  redis-cli -p "$port" info commandstats | tr -d '\r' >"$dir/stats.txt"
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  {
    printf '%-6s round %d:' "$name" "$round"
    grep -E '^\| (mkdir|create|unlink|rmdir|rename|setattr) ' "$dir/bench.txt" | awk -F'|' '{gsub(/ /,"",$2); gsub(/ /,"",$4); printf " %s %s/s", $2, $4}'
    awk -F'[:,=]' '/^cmdstat_fcall:/ {printf " | FCALLs %d, %.1f us each", $3, $7} /^cmdstat_/ {n += $3} END {printf " | commands %d\n", n}' "$dir/stats.txt"
  } >"$dir/line.txt"
}

echo "bench-meta --count $COUNT, 1 thread, on both sides at once; $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
for r in $(seq "$ROUNDS"); do
  side "$BEFORE" "${PORTS[0]}" before "$r" &
  side "$AFTER" "${PORTS[1]}" after "$r"
  wait
  cat "$WORK/before-$r/line.txt" "$WORK/after-$r/line.txt"
done
