# Sourced by e2e suites that test for hangs in a FUSE mount: a process stuck
# in a FUSE request ignores every signal but SIGKILL (and some not even
# that), so a hang found is ended by aborting the mount's connection, which
# fails its requests, and the suite fails instead of hanging the run.

# Aborts the FUSE connection of mount point $1.
abort_fuse() {
  local dev
  dev=$(mountpoint -d "$1" 2>/dev/null) || return 0
  mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
  echo 1 >"/sys/fs/fuse/connections/${dev#*:}/abort" 2>/dev/null || true
}

# wait_or_abort MNT SECONDS PID...: waits for the processes (children of the
# caller) to end, at most SECONDS in all. Returns 0 if all ended with status
# 0, 1 if one failed, 2 if the time ran out (then MNT's connection has been
# aborted so they end).
wait_or_abort() {
  local mnt=$1 deadline=$((SECONDS + $2)) p rc=0
  shift 2
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        abort_fuse "$mnt"
        return 2
      fi
      sleep 0.1
    done
    wait "$p" || rc=1
  done
  return "$rc"
}
