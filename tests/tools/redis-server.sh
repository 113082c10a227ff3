#!/usr/bin/env bash
# A private redis-server for tests, everything under DIR:
#   redis-server.sh start DIR   starts it on a free loopback port (and a Unix
#                               socket DIR/redis.sock) with AOF on, and writes
#                               DIR/env exporting TESSERA_TEST_REDIS_URL,
#                               TESSERA_TEST_REDIS_SOCKET_URL and
#                               TESSERA_TEST_REDIS_DIR
#   redis-server.sh restart DIR stops it (SIGTERM, like a service restart) and
#                               starts it again on the same port and data
#   redis-server.sh kill DIR    SIGKILL (a crash; AOF keeps what was fsync'd)
#   redis-server.sh stop DIR    stops it (idempotent)
# TESSERA_REDIS_APPENDFSYNC (at start) sets the AOF fsync policy: everysec
# (default) or always (every acknowledged write is on disk: what a test that
# kills the server and expects nothing acknowledged lost needs) or no; it is
# kept in DIR for restarts.
set -euo pipefail
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: redis-server.sh start|stop|restart|kill DIR" >&2; exit 2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

launch() {
  local port fsync seen
  port=$(cat "$dir/port")
  fsync=$(cat "$dir/appendfsync" 2>/dev/null || echo everysec)
  rm -f "$dir/redis.pid"
  seen=0  # the log of earlier tries stays
  [ ! -f "$dir/redis.log" ] || seen=$(wc -l <"$dir/redis.log")
  redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
    --dir "$dir" --appendonly yes --appendfsync "$fsync" --save "" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
  # Ours answers on its own socket, and the port answers with the same
  # process: free_port's port may have been taken meanwhile by a server of
  # another test started at the same moment (ours then fails to bind, and a
  # ping on the port would reach theirs). Then it must have loaded its data
  # (INFO is answered while it loads, PING is not).
  local ours="" theirs=""
  for _ in $(seq 1 200); do
    ours=$(server_pid -s "$dir/redis.sock")
    if [ -n "$ours" ]; then
      theirs=$(server_pid -p "$port")
      if [ "$ours" = "$theirs" ] && [ "$(redis-cli -s "$dir/redis.sock" ping 2>/dev/null || true)" = PONG ]; then
        return 0
      fi
    fi
    gave_up "$seen" && break
    sleep 0.05
  done
  echo "redis-server.sh: redis-server did not answer on port $port (${theirs:+a server of pid $theirs has it; }log:)" >&2
  tail -5 "$dir/redis.log" >&2 || true
  # Whatever of ours runs goes (by its socket: its pid file may not be written yet).
  redis-cli -s "$dir/redis.sock" shutdown nosave >/dev/null 2>&1 || true
  halt TERM
  return 1
}

# The process id of the server answering at redis-cli's address arguments
# (nothing if none answers).
server_pid() {
  { redis-cli "$@" info server 2>/dev/null || true; } | tr -d '\r' | sed -n 's/^process_id://p'
}

# Did the server started after log line $1 give up (its log says so, or its
# pid file names a process that is gone)?
gave_up() {
  awk -v n="$1" 'NR > n && /aborting/ { found = 1 } END { exit !found }' "$dir/redis.log" 2>/dev/null && return 0
  local pid
  pid=$(cat "$dir/redis.pid" 2>/dev/null || true)
  # No pid yet: not written (a daemonizing server creates the file, then
  # writes it; read in between, an empty pid made `kill -0` fail and the
  # start give up on a server that was still loading).
  [ -n "$pid" ] || return 1
  ! kill -0 "$pid" 2>/dev/null
}

halt() {  # signal
  [ -f "$dir/redis.pid" ] || return 0
  local pid; pid=$(cat "$dir/redis.pid" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  kill "-$1" "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  rm -f "$dir/redis.pid"
}

case "$cmd" in
  start)
    command -v redis-server >/dev/null || { echo "redis-server.sh: redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
    mkdir -p "$dir"
    case ${TESSERA_REDIS_APPENDFSYNC:-everysec} in
      always|everysec|no) echo "${TESSERA_REDIS_APPENDFSYNC:-everysec}" >"$dir/appendfsync" ;;
      *) echo "redis-server.sh: TESSERA_REDIS_APPENDFSYNC must be always, everysec or no" >&2; exit 2 ;;
    esac
    # A port taken by another server meanwhile: another free port.
    for attempt in 1 2 3 4 5; do
      free_port >"$dir/port"
      if launch; then break; fi
      [ "$attempt" -lt 5 ] || exit 1
    done
    port=$(cat "$dir/port")
    cat >"$dir/env" <<ENV
export TESSERA_TEST_REDIS_URL=redis://127.0.0.1:$port/0
export TESSERA_TEST_REDIS_SOCKET_URL=unix://$dir/redis.sock?db=0
export TESSERA_TEST_REDIS_DIR=$dir
ENV
    ;;
  restart) halt TERM; launch ;;
  kill) halt KILL; rm -f "$dir/redis.pid" ;;
  stop) halt TERM ;;
  *) echo "redis-server.sh: unknown command $cmd" >&2; exit 2 ;;
esac
