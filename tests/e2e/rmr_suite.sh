# Sourced by run_e2e.sh (suite "rmr", a volume with the trash off):
# `tessera rmr` of a big tree (TESSERA_E2E_RMR_ENTRIES: 10,000 by default,
# 3,000 with TESSERA_E2E_QUICK; 100,000 for the run recorded in
# docs/benchmarks.md; with the trash on 2,000, or the count asked for) through the mount's
# control channel, with long kernel caches that would otherwise keep
# showing what went: nothing is left (the kernel knows at once, fsck is
# clean, the objects are reclaimed); then with the trash on, the tree goes
# into the trash and its objects stay. An ordinary user removes only what
# rm -rf would let it remove.
ENTRIES=${TESSERA_E2E_RMR_ENTRIES:-$([ "${TESSERA_E2E_QUICK:-0}" = 1 ] && echo 3000 || echo 10000)}
make_tree() {  # DIR: ENTRIES entries in 10 directories, 20 files with data, a symlink
  python3 - "$1" "$ENTRIES" <<'PY'
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
per = max(1, (n - 10) // 10)
for d in range(10):
    sub = os.path.join(top, "d%d" % d)
    os.makedirs(sub)
    for i in range(per):
        os.close(os.open(os.path.join(sub, "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
for i in range(20):
    with open(os.path.join(top, "data%d" % i), "wb") as f:
        f.write(os.urandom(100000))
os.symlink("d0", os.path.join(top, "link"))
PY
}
count_entries() { find "$1" -mindepth 1 | wc -l; }

unmount_volume
mount_volume --attr-cache 60 --entry-cache 60 --dir-entry-cache 60
log "rmr: $ENTRIES entries, trash off"
t=$MNT/rmr-tree
mkdir "$t"
make_tree "$t"
want=$(count_entries "$t")
"$TESSERA" info "$t/data3" | awk '/object /{print $2}' >"$WORK/rmr.objects"
[ -s "$WORK/rmr.objects" ] || fail "no objects listed for a file of the tree"
stat "$t/d5/f7" "$t/data3" >/dev/null  # in the kernel's caches now (60 s)
out=$("$TESSERA" rmr "$t" 2>&1) || fail "rmr: $out"
grep -q "removed $t: $((want - 10)) files, 11 directories" <<<"$out" || fail "rmr reported: $out (want $want entries)"
[ ! -e "$t" ] || fail "the tree is still there after rmr"
[ ! -e "$t/d5/f7" ] || fail "the kernel still shows a removed file (its cached entry was not invalidated)"
ls "$MNT" | grep -q rmr-tree && fail "the tree is still listed"
# The background cleanup reclaims about 1,000 removed inodes a second, in
# inode order: the data files, made last, go last.
left=$(objects_left_after_wait "$WORK/rmr.objects" $((ENTRIES / 1000 + 20)))
[ "$left" -eq 0 ] || fail "$left object(s) of the removed tree are still in the bucket"

log "rmr: an ordinary user removes what it may, the rest stays and is reported"
u=$MNT/rmr-user
mkdir -p "$u/theirs" && echo x >"$u/theirs/roots" && chown -R 65534:65534 "$u" && chown 0:0 "$u/theirs" "$u/theirs/roots"
setpriv --reuid=65534 --regid=65534 --clear-groups bash -c "mkdir -p '$u/mine/a' && touch '$u/mine/a/f' '$u/zz'"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$TESSERA" rmr "$u" 2>&1) && fail "rmr as a user removed root's file: $out"
case $out in *"Permission denied"*roots*|*roots*"Permission denied"*) ;; *) fail "unclear refusal: $out" ;; esac
[ -e "$u/theirs/roots" ] || fail "the user's rmr removed root's file"
[ ! -e "$u/mine" ] && [ ! -e "$u/zz" ] || fail "the user's rmr left the user's own entries"
rm -rf "$u"
out=$("$TESSERA" rmr "$MNT" 2>&1) && fail "rmr of the mount's root succeeded"
case $out in *"root of a mount"*) ;; *) fail "unclear refusal for the root: $out" ;; esac

log "rmr: trash on, the tree goes into the trash with its data"
unmount_volume
"$TESSERA" config "$META" --trash-days 1 --yes >/dev/null
mount_volume --attr-cache 60 --entry-cache 60 --dir-entry-cache 60
mkdir "$t"
ENTRIES=${TESSERA_E2E_RMR_ENTRIES:-2000} make_tree "$t"  # the full count when one is asked for
want=$(count_entries "$t")
"$TESSERA" info "$t/data3" | awk '/object /{print $2}' >"$WORK/rmr.objects"
trash_before=$(find "$MNT/.trash" -mindepth 2 -maxdepth 2 | wc -l)
out=$("$TESSERA" rmr "$t" 2>&1) || fail "rmr with the trash on: $out"
[ ! -e "$t" ] || fail "the tree is still there after rmr"
trash_after=$(find "$MNT/.trash" -mindepth 2 -maxdepth 2 | wc -l)
[ $((trash_after - trash_before)) -eq $((want + 1)) ] || fail "the trash got $((trash_after - trash_before)) entries, want $((want + 1))"
sleep 1.5  # a cleanup round: trashed data stays
while read -r key; do obj_exists "$key" || fail "object $key of a trashed file was deleted"; done <"$WORK/rmr.objects"
rm -rf "$MNT/.trash/"*
unmount_volume
"$TESSERA" config "$META" --trash-days 0 --yes >/dev/null
mount_volume
