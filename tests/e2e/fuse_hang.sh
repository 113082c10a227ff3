# shellcheck shell=bash
# Sourced by e2e suites that test for hangs in a FUSE mount: a process stuck
# in a FUSE request ignores every signal but SIGKILL (and some not even
# that), so a hang found is ended by aborting the mount's connection, which
# fails its requests, and the suite fails instead of hanging the run. Nothing
# here touches the mount itself: a stat of a hung mount can hang too.

# The FUSE connection number of mount point $1 (from /proc/self/mountinfo).
fuse_conn() {
  local dev
  dev=$(awk -v m="$1" '$5 == m { d = $3 } END { print d }' /proc/self/mountinfo)
  [ -n "$dev" ] && echo "${dev#*:}"
}

# Aborts the FUSE connection of mount point $1.
abort_fuse() {
  local conn
  conn=$(fuse_conn "$1") || return 0
  mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
  echo 1 >"/sys/fs/fuse/connections/$conn/abort" 2>/dev/null || true
}

# hang_report MNT PID...: what the processes still alive wait for (to
# stderr), and the threads of the client serving MNT, before an abort. With
# HANG_BACKTRACES set to a file and gdb installed, the client's threads'
# backtraces go there too.
hang_report() {
  local mnt=$1 p client
  shift
  echo "--- hang in $mnt: processes still waiting" >&2
  for p in "$@"; do
    [ -e "/proc/$p" ] || continue
    echo "pid $p ($(cat "/proc/$p/comm" 2>/dev/null)): wchan $(cat "/proc/$p/wchan" 2>/dev/null)" >&2
    sed 's/^/    /' "/proc/$p/stack" >&2 2>/dev/null || true
  done
  client=$(pgrep -f "tessera mount .* $mnt( |\$)" | head -1)
  if [ -n "$client" ]; then
    echo "--- client $client: threads by name (numbers dropped) and wchan" >&2
    for t in /proc/"$client"/task/*; do
      echo "$(sed 's/[-0-9]*$//' "$t/comm" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
    done | sort | uniq -c >&2
    if [ -n "${HANG_BACKTRACES:-}" ] && command -v gdb >/dev/null; then
      timeout 60 gdb -p "$client" -batch -ex "thread apply all bt" >"$HANG_BACKTRACES" 2>&1 || true
      echo "--- the client's backtraces: $HANG_BACKTRACES" >&2
    fi
  fi
  echo "--- FUSE connection $(fuse_conn "$mnt"): $(cat "/sys/fs/fuse/connections/$(fuse_conn "$mnt")/waiting" 2>/dev/null) requests waiting" >&2
}

# wait_or_abort MNT SECONDS PID...: waits for the processes (children of the
# caller) to end, at most SECONDS in all. Returns 0 if all ended with status
# 0, 1 if one failed, 2 if the time ran out (then what they wait for is
# reported and MNT's connection has been aborted so they end).
wait_or_abort() {
  local mnt=$1 deadline=$((SECONDS + $2)) p rc=0
  shift 2
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        hang_report "$mnt" "$@"
        abort_fuse "$mnt"
        return 2
      fi
      sleep 0.1
    done
    wait "$p" 2>/dev/null || rc=1  # (its "Killed" line, if bash reports it here: the caller killed it)
  done
  return "$rc"
}

# bounded MNT SECONDS COMMAND...: runs COMMAND (which uses mount MNT) with
# wait_or_abort's limit and result.
bounded() {
  local mnt=$1 secs=$2
  shift 2
  "$@" &
  wait_or_abort "$mnt" "$secs" $!
}

# waiting_in_fuse PID: waits (at most 5 s) until process PID sleeps in a
# FUSE request (its wchan is the kernel's request_wait_answer).
waiting_in_fuse() {
  local _
  for _ in $(seq 1 50); do
    [ "$(cat "/proc/$1/wchan" 2>/dev/null)" = request_wait_answer ] && return 0
    sleep 0.1
  done
  return 1
}
