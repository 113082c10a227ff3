# shellcheck shell=bash disable=SC2034  # (variables used by the sourcing scripts)
# Shared by crash_loop.sh and engine_loss.sh (sourced, not run): the engine
# server, the volume, the mount and its client process, problems, cleanup.
#
# Before sourcing, a script sets CAMPAIGN (a short name for messages). After
# sourcing it calls campaign_init ENGINE, then uses:
#   TESSERA       the binary ($TESSERA, default build/src/tessera in the repo;
#                 campaign_init copies it into WORK and points TESSERA there)
#   WORKLOAD      tests/tools/crash_workload.py
#   WORK, MNT     the campaign's temporary directory and mount point
#   META          the volume's metadata URL
#   MOUNT_OPTS    extra mount options (array)
#   problem MSG   counts a problem (PROBLEMS) and prints it
# The EXIT trap stops the workload (WORKLOAD_PID), the mount and the server;
# WORK is removed unless there were problems or KEEP=1.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$REPO/tests/tools
WORKLOAD=$TOOLS/crash_workload.py
TESSERA=$(realpath "${TESSERA:-$REPO/build/src/tessera}")
[ -x "$TESSERA" ] || { echo "$CAMPAIGN: no tessera binary at $TESSERA (set TESSERA)" >&2; exit 2; }

PROBLEMS=0
WORKLOAD_PID=
MOUNT_OPTS=()
MOUNT_N=0

log() { printf '[%s %s] %s\n' "$CAMPAIGN" "$(date +%T)" "$*"; }
problem() {
  PROBLEMS=$((PROBLEMS + 1))
  printf '[%s %s] PROBLEM: %s\n' "$CAMPAIGN" "$(date +%T)" "$*" >&2
}

# campaign_init ENGINE: makes WORK and starts the engine's private server.
campaign_init() {
  ENGINE=$1
  WORK=$(mktemp -d "/tmp/tessera-$CAMPAIGN.XXXXXX")
  chmod 755 "$WORK"  # the PostgreSQL server's user must traverse it
  MNT=$WORK/mnt
  mkdir -p "$MNT" "$WORK/logs"
  trap campaign_cleanup EXIT
  # A campaign runs for minutes: its own copy of the binary, so that a
  # rebuild meanwhile (ninja replaces build/src/tessera) cannot make a
  # remount fail with "Permission denied" or mix two builds in one run.
  cp "$TESSERA" "$WORK/tessera"
  TESSERA=$WORK/tessera
  trap 'exit 130' INT TERM
  case $ENGINE in
    sqlite) META="sqlite3://$WORK/meta.db" ;;
    redis)
      # appendfsync always: a reply means the write is in the AOF on disk, so
      # a kill -9 of the server loses nothing the client was told is done.
      TESSERA_REDIS_APPENDFSYNC=always bash "$TOOLS/redis-server.sh" start "$WORK/redis"
      # shellcheck disable=SC1091
      source "$WORK/redis/env"
      META=$TESSERA_TEST_REDIS_URL
      ;;
    postgres)
      bash "$TOOLS/pg-server.sh" start "$WORK/pg" >/dev/null
      # shellcheck disable=SC1091
      source "$WORK/pg/env"
      META=$TESSERA_TEST_PG_URL
      ;;
    *) echo "$CAMPAIGN: unknown engine $ENGINE (sqlite, redis or postgres)" >&2; exit 2 ;;
  esac
}

# The engine server's processes (redis-server; the postmaster and children).
engine_pids() {
  case $ENGINE in
    redis) cat "$WORK/redis/redis.pid" 2>/dev/null || true ;;
    postgres)
      local pm
      pm=$(head -n 1 "$WORK/pg/data/postmaster.pid" 2>/dev/null || true)
      if [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null; then echo "$pm"; pgrep -P "$pm" || true; fi
      ;;
  esac
}
engine_kill() {  # SIGKILL: a crash of the server
  case $ENGINE in
    redis) bash "$TOOLS/redis-server.sh" kill "$WORK/redis" ;;
    postgres) bash "$TOOLS/pg-server.sh" kill "$WORK/pg" ;;
  esac >>"$WORK/logs/engine.log" 2>&1
}
engine_start_again() {  # after engine_kill (same port, same data)
  case $ENGINE in
    redis) bash "$TOOLS/redis-server.sh" restart "$WORK/redis" ;;
    postgres) bash "$TOOLS/pg-server.sh" restart "$WORK/pg" ;;
  esac >>"$WORK/logs/engine.log" 2>&1
}
engine_signal() {  # STOP or CONT to every server process
  local pids
  pids=$(engine_pids)
  [ -n "$pids" ] || { problem "no engine server process to send SIG$1"; return 0; }
  # shellcheck disable=SC2086
  kill "-$1" $pids
}
engine_shutdown() {
  case $ENGINE in
    redis) [ -d "$WORK/redis" ] && { engine_signal_quiet CONT; bash "$TOOLS/redis-server.sh" stop "$WORK/redis" || true; } ;;
    postgres) [ -d "$WORK/pg" ] && { engine_signal_quiet CONT; bash "$TOOLS/pg-server.sh" stop "$WORK/pg" || true; } ;;
  esac
  return 0
}
engine_signal_quiet() {
  local pids
  pids=$(engine_pids)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill "-$1" $pids 2>/dev/null || true
}

format_volume() {
  "$TESSERA" format "$META" crash-vol --bucket "$WORK/bucket" --block-size 64 --trash-days 0 >"$WORK/format.log" 2>&1 ||
    { cat "$WORK/format.log" >&2; echo "$CAMPAIGN: format failed" >&2; exit 1; }
}

# Mounts in the background, each mount with its own log file; MOUNT_LOG names it.
mount_volume() {
  MOUNT_N=$((MOUNT_N + 1))
  MOUNT_LOG=$WORK/logs/mount.$(printf %03d "$MOUNT_N").log
  timeout 120 "$TESSERA" mount "$META" "$MNT" -d --log "$MOUNT_LOG" "${MOUNT_OPTS[@]}" "$@" >>"$WORK/logs/mount-cmd.log" 2>&1
}

# The pid of the client process serving MNT (argv: TESSERA mount META MNT -d ...).
mount_pid() {
  local d
  for d in /proc/[0-9]*; do
    if tr '\0' '\n' 2>/dev/null <"$d/cmdline" |
      awk -v m="$MNT" 'NR == 2 && $0 != "mount" { bad = 1; exit } $0 == m { f = 1 } END { exit (bad || !f) }'; then
      echo "${d#/proc/}"
    fi
  done
}

# Waits up to $2 seconds for process $1 (a child) to exit; its status in
# WAITED_RC. Returns 1 if it is still running.
wait_for() {
  local pid=$1 secs=$2 i
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then return 1; fi
  WAITED_RC=0
  wait "$pid" || WAITED_RC=$?
  return 0
}

# What a hung process waits on (for the report).
hang_evidence() {
  local pid=$1
  echo "  process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-200)"
  echo "  state: $(awk '/^State/ {print $2, $3}' "/proc/$pid/status" 2>/dev/null), wchan: $(cat "/proc/$pid/wchan" 2>/dev/null)"
  sed 's/^/  kernel stack: /' "/proc/$pid/stack" 2>/dev/null | head -20 || true
}

campaign_cleanup() {
  local rc=$?
  set +e
  if [ -n "$WORKLOAD_PID" ] && kill -0 "$WORKLOAD_PID" 2>/dev/null; then
    kill -9 "$WORKLOAD_PID" 2>/dev/null
    wait "$WORKLOAD_PID" 2>/dev/null
  fi
  engine_signal_quiet CONT  # a paused server would hang the unmount
  if mountpoint -q "$MNT" 2>/dev/null; then
    timeout 60 "$TESSERA" umount "$MNT" >/dev/null 2>&1 || umount -l "$MNT" 2>/dev/null
  fi
  local pid
  for pid in $(mount_pid); do kill -9 "$pid" 2>/dev/null; done
  engine_shutdown
  if [ "$PROBLEMS" -gt 0 ] || [ "$rc" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
    echo "[$CAMPAIGN] kept $WORK (journal, logs/mount.NNN.log, logs/*.log) for inspection" >&2
  else
    rm -rf "$WORK"
  fi
}
