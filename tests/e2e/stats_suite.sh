# Sourced by run_e2e.sh (suite "stats"): directory statistics through a real
# mount. A tree built with creates, writes, truncates, hard links, renames
# across directories and removals; once the client flushed (a second),
# `tessera summary --json` and `info -r` agree with what find says. Then the
# client is killed with SIGKILL right after more changes: every engine's
# clients write statistics once a second, so fsck names the directories whose
# statistics lag and fsck --repair recomputes them; summary agrees with find
# after.
log "stats: tessera summary and info -r agree with find"
s=$MNT/stats-tree
mkdir -p "$s/a/b/c" "$s/d" "$s/e"
for i in $(seq 1 40); do head -c $((i * 1000)) /dev/zero >"$s/a/f$i"; done
head -c 3000000 /dev/urandom >"$s/a/b/big"
ln "$s/a/b/big" "$s/d/big-link"   # one file, two names: counted in both directories
ln "$s/a/b/big" "$s/e/big-link2"
truncate -s 123456 "$s/a/f3"
mv "$s/a/f4" "$s/d/f4-moved"
mv "$s/a/b/c" "$s/d/c"
echo small >"$s/d/c/inner"
ln -s ../a/f1 "$s/e/sym"
mkfifo "$s/e/fifo"
rm "$s/a/f5" "$s/e/big-link2"
head -c 5000 /dev/zero >>"$s/a/b/big"  # grows: both remaining names follow

# What find says: every name of a non-directory counts (hard links once per
# name); length is the sum of regular files' sizes, space each rounded to 4 KiB.
expect_tree() {
  local dirs files length space
  dirs=$(find "$1" -type d | wc -l)
  files=$(find "$1" ! -type d | wc -l)
  length=$(find "$1" -type f -printf '%s\n' | awk '{t += $1} END {print t + 0}')
  space=$(find "$1" -type f -printf '%s\n' | awk '{t += int(($1 + 4095) / 4096) * 4096} END {print t + 0}')
  echo "$dirs $files $length $space"
}
summary_tree() {
  "$TESSERA" summary "$1" --json --depth 0 |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["dirs"], j["files"], j["length"], j["size"])'
}
check_summary() {  # $1: what, then waits for the client's next flush
  local want got
  want=$(expect_tree "$s")
  for _ in $(seq 1 30); do
    got=$(summary_tree "$s") || fail "tessera summary failed: $got"
    [ "$got" = "$want" ] && break
    sleep 0.2
  done
  [ "$got" = "$want" ] || fail "$1: summary says dirs/files/length/space $got, find says $want"
}
check_summary "after the workload"
want=$(expect_tree "$s/a")
got=$(summary_tree "$s/a")
[ "$got" = "$want" ] || fail "summary of a subtree: $got, find says $want"
"$TESSERA" info -r "$s" | grep -q "tree: $(expect_tree "$s" | awk '{print $1 " dirs, " $2 " files, length " $3}') bytes" ||
  fail "info -r: $("$TESSERA" info -r "$s" | grep tree:)"
out=$("$TESSERA" summary "$s" --depth 1 --entries 2)
grep -q '(.* more)' <<<"$out" || fail "summary --entries 2 folds no row: $out"
grep -q "^| a/ " <<<"$out" || fail "summary table has no row for a/: $out"
out=$("$TESSERA" summary "$WORK/nope" 2>&1) && fail "summary of a missing path succeeded"
case $out in *"No such file"*) ;; *) fail "unclear error for a missing path: $out" ;; esac
out=$("$TESSERA" summary /tmp 2>&1) && fail "summary outside a mount succeeded"
case $out in *"not inside a Tessera mount"*) ;; *) fail "unclear error outside a mount: $out" ;; esac
# Through the mount's control channel, as the caller: a user may summarise
# what they may read, and not a directory they may not.
got=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$TESSERA" summary "$s" --json --depth 0 |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["dirs"], j["files"], j["length"], j["size"])') ||
  fail "summary as a user failed"
[ "$got" = "$(expect_tree "$s")" ] || fail "summary as a user: $got"
mkdir -m 700 "$s/private"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$TESSERA" summary "$s/private" 2>&1) &&
  fail "a user summarised a directory they may not read"
case $out in *"Permission denied"*) ;; *) fail "unclear refusal for a user: $out" ;; esac
rmdir "$s/private"

log "stats: a client killed before its flush; fsck --repair recomputes the statistics"
# A flush can fall between the last change and the kill (a few ms of every
# second): then nothing was lost, and the crash is tried again.
for attempt in 1 2 3; do
  pid=$(pgrep -f "tessera mount .* $MNT -d" | head -1)
  [ -n "$pid" ] || fail "cannot find the client process"
  for i in $(seq 1 30); do echo "late $i" >"$s/d/late$attempt-$i"; done
  rm "$s/a/f$((5 + attempt))"
  kill -9 "$pid"
  umount -l "$MNT" 2>/dev/null || true
  out=$("$TESSERA" fsck "$META" 2>&1) || true
  if grep -q ": statistics (length" <<<"$out"; then
    "$TESSERA" fsck "$META" --repair >"$WORK/repair.out" 2>&1 || fail "fsck --repair: $(cat "$WORK/repair.out")"
    grep -q "statistics" "$WORK/repair.out" || fail "fsck --repair changed no statistics: $(cat "$WORK/repair.out")"
    break
  fi
  [ "$attempt" -lt 3 ] || fail "three crashes lost no statistics: the client writes them at once? $out"
  mount_volume
done
"$TESSERA" fsck "$META" >"$WORK/fsck.out" 2>&1 || fail "fsck after the repair: $(cat "$WORK/fsck.out")"
grep -q ": statistics (length" "$WORK/fsck.out" && fail "statistics still off after the repair: $(cat "$WORK/fsck.out")"
mount_volume
check_summary "after the crash and repair"
