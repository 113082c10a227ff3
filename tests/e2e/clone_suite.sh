# Sourced by run_e2e.sh (suite "clone"): tessera clone through a real mount.
# A 200 MiB file and a 5,000-file tree are cloned without a new object in
# the bucket; the copies read the same; a write to a copy leaves the source
# alone; with the source removed (and the client's caches gone) the copy
# still reads back; with both gone the objects are reclaimed. Refusals: an
# existing destination, a destination outside the mount, an unreadable
# source for a user, a quota.
count_objects() { find "$WORK/bucket/chunks" -type f 2>/dev/null | wc -l; }
wait_objects() {  # $1: the count background deletion must reach
  local n
  for _ in $(seq 1 100); do
    n=$(count_objects)
    [ "$n" -le "$1" ] && break
    sleep 0.2
  done
  echo "$n"
}
[ "$STORAGE" = file ] || fail "the clone suite counts objects in a local bucket"
big_mib=200
tree_files=5000
if [ "$QUICK" = 1 ]; then big_mib=32; tree_files=1000; fi
c=$MNT/clone
mkdir -p "$c/tree"
before_suite=$(wait_objects 1000000)  # objects of files other suites left (e2e_redis shares one volume)

log "clone: a $big_mib MiB file, by metadata only"
head -c $((big_mib << 20)) /dev/urandom >"$c/big"
for i in $(seq 1 "$tree_files"); do echo "file $i" >"$c/tree/f$i"; done
mkdir "$c/tree/sub" && head -c 300000 /dev/urandom >"$c/tree/sub/data"
ln -s f1 "$c/tree/link"
sync
base=$(wait_objects 1000000)
sum_big=$(md5sum <"$c/big")
t0=$(date +%s.%N)
"$TESSERA" clone "$c/big" "$c/big-copy" 2>"$WORK/clone.out" || fail "clone of a file: $(cat "$WORK/clone.out")"
t1=$(date +%s.%N)
log "clone: $big_mib MiB in $(echo "$t1 - $t0" | bc) s"
[ "$(count_objects)" = "$base" ] || fail "cloning a file wrote objects: $base -> $(count_objects)"
[ "$(md5sum <"$c/big-copy")" = "$sum_big" ] || fail "the copy reads differently"

log "clone: a $tree_files-file tree"
"$TESSERA" clone "$c/tree" "$c/tree-copy" 2>"$WORK/clone.out" || fail "clone of a tree: $(cat "$WORK/clone.out")"
grep -q "$((tree_files + 4)) entries" "$WORK/clone.out" || fail "clone of a tree: $(cat "$WORK/clone.out")"
[ "$(count_objects)" = "$base" ] || fail "cloning a tree wrote objects: $base -> $(count_objects)"
diff -r "$c/tree" "$c/tree-copy" >/dev/null || fail "the tree's copy differs"
[ "$(readlink "$c/tree-copy/link")" = f1 ] || fail "the symlink's copy"

log "clone: a write to the copy leaves the source alone"
printf 'changed' | dd of="$c/big-copy" bs=1 seek=$((5 << 20)) conv=notrunc status=none
echo "more" >>"$c/tree-copy/f7"
[ "$(md5sum <"$c/big")" = "$sum_big" ] || fail "a write to the copy changed the source"
[ "$(cat "$c/tree/f7")" = "file 7" ] || fail "an append to the copy changed the source"
sum_copy=$(md5sum <"$c/big-copy")
[ "$sum_copy" != "$sum_big" ] || fail "the write to the copy did not show"

log "clone: the source removed, caches dropped: the copy reads back"
rm -rf "$c/big" "$c/tree"
unmount_volume
mount_volume
[ "$(md5sum <"$c/big-copy")" = "$sum_copy" ] || fail "the copy of the big file after the source went"
[ "$(cat "$c/tree-copy/f$tree_files")" = "file $tree_files" ] || fail "a file of the tree's copy"
[ "$(cat "$c/tree-copy/f7")" = "$(printf 'file 7\nmore')" ] || fail "the changed file of the tree's copy"
[ "$(find "$c/tree-copy" -type f | wc -l)" = $((tree_files + 1)) ] || fail "the tree's copy lost files"

log "clone: refusals"
out=$("$TESSERA" clone "$c/big-copy" "$c/tree-copy" 2>&1) && fail "clone onto an existing name succeeded"
case $out in *"already exists"*) ;; *) fail "unclear error for an existing destination: $out" ;; esac
out=$("$TESSERA" clone "$c/big-copy" /tmp/tessera-clone-outside 2>&1) && fail "clone out of the mount succeeded"
case $out in *"not inside a Tessera mount"* | *"same mount"*) ;; *) fail "unclear error outside the mount: $out" ;; esac
echo secret >"$c/secret" && chmod 600 "$c/secret" && chmod 1777 "$c"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$TESSERA" clone "$c/secret" "$c/stolen" 2>&1) &&
  fail "a user cloned a file they cannot read"
case $out in *"Permission denied"*) ;; *) fail "unclear refusal for a user: $out" ;; esac
[ ! -e "$c/stolen" ] || fail "the refused clone left a name"
mkdir "$c/q"
"$TESSERA" quota set "$META" --path /clone/q --capacity 0.01 >/dev/null
sleep 1
out=$("$TESSERA" clone "$c/big-copy" "$c/q/big" 2>&1) && fail "a clone past a quota succeeded"
case $out in *"quota"*) ;; *) fail "unclear refusal for the quota: $out" ;; esac
"$TESSERA" quota delete "$META" --path /clone/q >/dev/null

log "clone: both copies removed: the objects are reclaimed"
rm -rf "$c"
left=$(wait_objects "$before_suite")
[ "$left" -le "$before_suite" ] || fail "$((left - before_suite)) objects left after removing every copy"
