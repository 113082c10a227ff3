# Sourced by run_e2e.sh (suite "trash", a volume with the trash on): rm -rf
# of a tree moves it into /.trash with its data; `tessera restore` lists,
# then --put-back gives it back byte for byte (symlinks, modes, empty
# directories; a file's earlier hard links are not kept: only its last name
# goes to the trash);
# removed again and aged past trash-days (its hour directory renamed to an
# old hour, as root), `tessera gc --delete` purges it and its objects are
# really gone from the bucket. An ordinary user cannot change the trash.
[ "$TRASH_DAYS" -gt 0 ] || fail "the trash suite needs a volume with the trash on"
log "trash: rm -rf of a tree, then restore --put-back"
# What earlier suites removed this hour would be restored too: empty the
# trash first (as root; removals inside the trash are final).
rm -rf "$MNT/.trash/"*
[ -z "$(ls "$MNT/.trash")" ] || fail "the trash cannot be emptied: $(ls "$MNT/.trash")"
t=$MNT/trash-tree
mkdir -p "$t/a/b" "$t/empty"
head -c 3000000 /dev/urandom >"$t/a/big"
for i in $(seq 1 20); do echo "small $i" >"$t/a/b/s$i"; done
ln -s a/big "$t/sym"
chmod 640 "$t/a/b/s3"
(cd "$t" && find . -printf '%p %y %m %n %s %l\n' | LC_ALL=C sort) >"$WORK/trash-before"
(cd "$t" && find . -type f -exec md5sum {} + | LC_ALL=C sort -k2) >"$WORK/trash-sums"
# A few of its objects (each check of an S3 object is a boto3 process).
"$TESSERA" info "$t/a/big" | awk '/object /{print $2}' | head -5 >"$WORK/trash.objects"
[ -s "$WORK/trash.objects" ] || fail "no objects listed for the big file"
rm -rf "$t"
[ ! -e "$t" ] || fail "rm -rf left the tree"
hour=$(ls "$MNT/.trash" | tail -1)
[ -n "$hour" ] || fail "nothing in /.trash after rm -rf"
[ "$(ls "$MNT/.trash/$hour" | wc -l)" -ge 26 ] || fail "the trash hour holds $(ls "$MNT/.trash/$hour" | wc -l) entries, want 26+"
user_out=$(setpriv --reuid=65534 --regid=65534 --clear-groups rm -f "$MNT/.trash/$hour/$(ls "$MNT/.trash/$hour" | grep -- '-s1$')" 2>&1) &&
  fail "an ordinary user removed an entry of the trash"
case $user_out in *"ermission denied"*) ;; *) fail "unclear refusal: $user_out" ;; esac
sleep 2  # the background cleanup runs every second: it must leave them alone
while read -r key; do obj_exists "$key" || fail "object $key of a trashed file was deleted"; done <"$WORK/trash.objects"
unmount_volume
out=$("$TESSERA" restore "$META" "$hour")
grep -q "would put back" <<<"$out" || fail "restore (dry run): $out"
"$TESSERA" restore "$META" "$hour" --put-back >"$WORK/restore.out" 2>&1 || fail "restore --put-back: $(cat "$WORK/restore.out")"
mount_volume
(cd "$t" && find . -printf '%p %y %m %n %s %l\n' | LC_ALL=C sort) >"$WORK/trash-after"
diff "$WORK/trash-before" "$WORK/trash-after" >&2 || fail "the restored tree differs"
(cd "$t" && md5sum -c --quiet "$WORK/trash-sums") || fail "restored data differs"
log "trash: past trash-days, gc --delete purges it and its objects go"
rm -rf "$t"
mv "$MNT/.trash/$hour" "$MNT/.trash/2000-01-01-00"
unmount_volume
"$TESSERA" gc "$META" --delete >"$WORK/gc.out" 2>&1 || fail "gc --delete: $(cat "$WORK/gc.out")"
grep -q "expired entr" "$WORK/gc.out" || fail "gc --delete did not purge the trash: $(cat "$WORK/gc.out")"
left=$(objects_left_after_wait "$WORK/trash.objects")
[ "$left" -eq 0 ] || fail "$left object(s) of the purged file are still in the bucket"
mount_volume
[ ! -e "$MNT/.trash/2000-01-01-00" ] || fail "the expired hour is still in the trash"
"$TESSERA" fsck "$META" >/dev/null || fail "fsck after the purge"
