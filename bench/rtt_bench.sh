#!/usr/bin/env bash
# bench/rtt_bench.sh — what a metadata operation costs in round trips to the
# engine, through a mount on Redis with RTT milliseconds of round-trip time
# added between the client and Redis (issue 14's targets: create+close <= 2,
# stat <= 1, rename <= 3, unlink <= 2, caches dropped before each phase).
# The client reaches Redis through bench/delay_proxy.py, which delays each
# direction by RTT/2 (this kernel has no netem). For each mode (the default
# options, and --coherent-cache 0: no watching, 1 s kernel caches), FILES
# files are created and closed, stat'ed, renamed and unlinked in one
# directory, one phase at a time, the kernel's caches dropped before each.
# Per operation: wall time divided by the RTT, and the engine requests it
# cost the mount (its .stats; on Redis each is one round trip).
# usage: bench/rtt_bench.sh TESSERA [--files 200] [--rtt-ms 2] [--modes "default nocoherent"]
# Needs root (drop_caches) and redis-server. Prints a markdown table.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,15p "$0"; exit 2; }
T=$(realpath "$1"); shift
FILES=200
RTT_MS=2
MODES="default nocoherent"
while [ $# -gt 0 ]; do
  case $1 in
    --files) FILES=$2; shift 2 ;;
    --rtt-ms) RTT_MS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v redis-server >/dev/null || { echo "needs redis-server" >&2; exit 2; }
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REDIS_PORT=6391
PROXY_PORT=6392
WORK=$(mktemp -d /var/tmp/tessera-rtt.XXXXXX)
PROXY_PID=
cleanup() {
  mountpoint -q "$WORK/mnt" && { "$T" umount "$WORK/mnt" || umount -l "$WORK/mnt"; }
  [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null || true
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt"

redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize yes \
  --dir "$WORK" --logfile "$WORK/redis.log" >/dev/null
for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
# The kernel here has no netem: a delay line in user space, RTT/2 each way.
python3 "$BENCH/delay_proxy.py" "$PROXY_PORT" "$REDIS_PORT" "$RTT_MS" &
PROXY_PID=$!
for _ in $(seq 1 50); do redis-cli -p "$PROXY_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
META="redis://127.0.0.1:$PROXY_PORT/1"
measured=$(python3 - "$PROXY_PORT" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
best = 1e9
for _ in range(20):
    t = time.perf_counter(); s.sendall(b"PING\r\n"); s.recv(64); best = min(best, time.perf_counter() - t)
print("%.3f" % (best * 1000))
PY
)

echo "| mode | create+close | stat | rename | unlink |"
echo "|---|---:|---:|---:|---:|"
for mode in $MODES; do
  opts=()
  [ "$mode" = nocoherent ] && opts=(--coherent-cache 0)
  redis-cli -p "$REDIS_PORT" -n 1 flushdb >/dev/null
  rm -rf "$WORK/bucket"
  "$T" format "$META" rtt --bucket "$WORK/bucket" --trash-days 0 >/dev/null 2>&1
  "$T" mount "$META" "$WORK/mnt" -d --log "$WORK/mount.log" "${opts[@]}" >/dev/null 2>&1
  mkdir "$WORK/mnt/d"
  sleep 1
  python3 - "$WORK/mnt/d" "$FILES" 127.0.0.1 "$REDIS_PORT" "$measured" "$mode" <<'PY'
import os, socket, sys, time
d, n, host, port, rtt_ms, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
stats = os.path.join(os.path.dirname(d), ".stats")
def requests():  # engine requests the mount made (each one round trip on Redis)
    n = 0
    for line in open(stats):
        # close is counted there but is client-local (it asks the engine nothing)
        if line.startswith("tessera_meta_op_duration_seconds_count") and 'op="close"' not in line:
            n += int(float(line.split()[-1]))
    return n
def phase(fn):
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f: f.write("3")
    r0 = requests()
    t = time.perf_counter()
    for i in range(n): fn(i)
    took = time.perf_counter() - t
    return "%.2f RTT, %.2f req" % (took / n * 1000 / rtt_ms, (requests() - r0) / n)
cells = [
    phase(lambda i: os.close(os.open("%s/f%d" % (d, i), os.O_CREAT | os.O_WRONLY, 0o644))),
    phase(lambda i: os.stat("%s/f%d" % (d, i))),
    phase(lambda i: os.rename("%s/f%d" % (d, i), "%s/g%d" % (d, i))),
    phase(lambda i: os.unlink("%s/g%d" % (d, i))),
]
print("| %s | %s |" % (mode, " | ".join(cells)))
PY
  "$T" umount "$WORK/mnt"
done
echo
echo "RTT measured with PING through the proxy: ${measured} ms (${RTT_MS} ms added); $FILES files per phase."
