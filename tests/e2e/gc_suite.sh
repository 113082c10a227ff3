# Sourced by run_e2e.sh (suite "gc"): `tessera gc` on a volume with
#   - files that must survive untouched,
#   - objects leaked by a client killed in the middle of a big write,
#   - objects that look leaked but are young (an upload whose commit may not
#     have landed): reported, never deleted,
#   - slices whose deletion is pending (a file removed just before unmount).
# gc lists them, --delete removes the old leaks and finishes the pending
# deletions, the files read back the same, and a second gc finds nothing.
# Then `fsck --check-objects` on the healthy volume, and after one referenced
# object is removed from the bucket: it names the broken file (once, though it
# has two links), and --path narrows the check. Last, `tessera config`: the
# immutable settings are refused, a limit below the usage needs --yes, and a
# live mount applies new capacity and inode limits at its next heartbeat.
# gc --compact merges a fragmented file beside a live mount; destroy is
# refused until everything is right, then removes every object and record.
[ "$STORAGE" = file ] || fail "gc needs the file storage (it ages objects with touch)"
count_of() { "$TESSERA" gc "$META" 2>/dev/null | grep "$1" | sed -E 's/.*: +([0-9]+) object.*/\1/'; }

log "gc: files that must survive, a client killed mid-write, a deletion left pending"
head -c 3000000 /dev/urandom >"$WORK/keep1"
head -c 700000 /dev/urandom >"$WORK/keep2"
cp "$WORK/keep1" "$MNT/keep1"
cp "$WORK/keep2" "$MNT/keep2"
# A big write whose full blocks are uploaded as it goes, then the client dies
# before the commit at close: its objects are leaked.
python3 - "$MNT/doomed" <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, os.urandom(6 << 20))
time.sleep(1000)
PY
writer=$!
holds "$writer"
sleep 2
kill_client
kill "$writer" 2>/dev/null || true
wait "$writer" 2>/dev/null || true
mount_volume
# A deletion left pending: the file goes, the client unmounts at once.
head -c 2000000 /dev/urandom >"$MNT/removed"
rm "$MNT/removed"
unmount_volume
leaked=$(count_of "unreferenced, under 1 h")
[ "${leaked:-0}" -gt 0 ] || fail "gc does not see the killed writer's objects ($("$TESSERA" gc "$META" 2>&1))"
log "gc sees $leaked young unreferenced object(s); none may be deleted yet"
"$TESSERA" gc "$META" --delete >/dev/null || fail "gc --delete"
[ "$(count_of "unreferenced, under 1 h")" = "$leaked" ] || fail "gc --delete deleted young objects"
# Age every object by two hours: the unreferenced ones become leaks.
find "$WORK/bucket/chunks" -type f -exec touch -d '2 hours ago' {} +
old=$(count_of "leaked:")
[ "$old" = "$leaked" ] || fail "after ageing, gc reports $old leaked object(s), want $leaked"
"$TESSERA" gc "$META" --delete || fail "gc --delete"
[ "$(count_of "leaked:")" = 0 ] || fail "leaked objects left after gc --delete"
[ "$(count_of "pending deletion:")" = 0 ] || fail "pending deletions left after gc --delete"
mount_volume
echo 3 >/proc/sys/vm/drop_caches
cmp "$WORK/keep1" "$MNT/keep1" || fail "gc damaged a referenced file (keep1)"
cmp "$WORK/keep2" "$MNT/keep2" || fail "gc damaged a referenced file (keep2)"

log "fsck --check-objects: a clean volume, then one referenced object removed from the bucket"
mkdir -p "$MNT/dir/sub"
head -c 500000 /dev/urandom >"$MNT/dir/sub/victim"
ln "$MNT/dir/sub/victim" "$MNT/dir/victim-link"
unmount_volume
out=$("$TESSERA" fsck "$META" --check-objects 2>&1) || fail "fsck --check-objects on a healthy volume: $out"
grep -q "0 broken file(s)" <<<"$out" || fail "fsck --check-objects did not report its count: $out"
mount_volume
vid=$("$TESSERA" info "$MNT/dir/sub/victim" | sed -nE 's/.*(chunks\/[^ ]*).*/\1/p' | head -1)
unmount_volume
[ -n "$vid" ] || fail "tessera info shows no object of dir/sub/victim"
rm -f "$WORK/bucket/$vid"
set +e
out=$("$TESSERA" fsck "$META" --check-objects 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "fsck --check-objects exits 0 with an object missing: $out"
grep -qE "broken: /dir/(sub/victim|victim-link): 1 bad block" <<<"$out" || fail "fsck --check-objects does not name the broken file: $out"
[ "$(echo "$out" | grep -c '^broken:')" = 1 ] || fail "fsck --check-objects names other files too: $out"
log "fsck --check-objects: $(echo "$out" | grep '^broken:')"
out=$("$TESSERA" fsck "$META" --check-objects --path /dir/sub 2>&1 || true)
grep -q "1 broken file(s)" <<<"$out" || fail "fsck --check-objects --path /dir/sub: $out"
"$TESSERA" fsck "$META" --check-objects --path /keep1 >/dev/null 2>&1 || fail "fsck --check-objects --path /keep1 (a healthy file) failed"
set +e
out=$("$TESSERA" fsck "$META" --check-objects --path /no/such 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] && grep -q "no/such" <<<"$out" || fail "fsck --path of a missing path: rc $rc: $out"
mount_volume

log "config: show the settings; change the capacity and inode limit under a live mount"
unmount_volume
mount_volume --session-timeout 10  # a heartbeat every 2 s: the test waits less
grep -q '"BlockSize"' <<<"$("$TESSERA" config "$META")" || fail "tessera config does not show the settings"
if "$TESSERA" config "$META" --block-size 1M 2>"$WORK/config.err"; then fail "config --block-size was accepted"; fi
grep -q "cannot change --block-size" "$WORK/config.err" || fail "config --block-size: $(cat "$WORK/config.err")"
before=$("$TESSERA" config "$META")
if "$TESSERA" config "$META" --capacity 0.0001 </dev/null 2>"$WORK/config.err"; then
  fail "a capacity below the usage was set without --yes"
fi
grep -q "add --yes" "$WORK/config.err" || fail "config below the usage: $(cat "$WORK/config.err")"
[ "$("$TESSERA" config "$META")" = "$before" ] || fail "a refused config changed the settings"
wait_df() {  # wait_df FIELD VALUE: until df of the mount shows it (mounts apply settings at a heartbeat)
  for _ in $(seq 1 40); do
    [ "$(df -B1 --output="$1" "$MNT" | tail -1 | tr -d ' ')" = "$2" ] && return 0
    sleep 0.5
  done
  fail "df $1 of the mount is $(df -B1 --output="$1" "$MNT" | tail -1), not $2, 20 s after tessera config"
}
"$TESSERA" config "$META" --capacity 0.03125 >/dev/null || fail "config --capacity"
wait_df size $((32 << 20))
if dd if=/dev/zero of="$MNT/too-big" bs=1M count=40 conv=fsync status=none 2>"$WORK/dd.err"; then
  fail "a 40 MiB write fit in a 32 MiB volume"
fi
grep -q "No space left" "$WORK/dd.err" || fail "over the capacity: $(cat "$WORK/dd.err")"
rm -f "$MNT/too-big"
"$TESSERA" config "$META" --capacity 0 >/dev/null || fail "config --capacity 0"
wait_df size $((1 << 50))
dd if=/dev/zero of="$MNT/now-fits" bs=1M count=40 conv=fsync status=none || fail "40 MiB after the limit was lifted"
rm -f "$MNT/now-fits"
iused=$(df --output=iused "$MNT" | tail -1 | tr -d ' ')
"$TESSERA" config "$META" --inodes $((iused + 3)) >/dev/null || fail "config --inodes"
wait_df itotal $((iused + 3))
made=0
for i in $(seq 1 6); do touch "$MNT/inode-$i" 2>/dev/null && made=$((made + 1)); done
[ "$made" = 3 ] || fail "with room for 3 more inodes, $made files could be created"
"$TESSERA" config "$META" --inodes 0 >/dev/null || fail "config --inodes 0"
rm -f "$MNT"/inode-*
log "config: the capacity and inode limits took effect in the mount within a heartbeat, and were lifted"

log "gc --compact: a file of 40 fsync'd appends becomes one slice, beside a live mount"
unmount_volume
mount_volume --compact-threshold 0  # the mount itself never compacts: gc must
python3 - "$MNT/fragmented" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(40):
    os.write(fd, os.urandom(10000))
    os.fsync(fd)
os.close(fd)
PY
cp "$MNT/fragmented" "$WORK/fragmented.ref"
grep -q "chunk 0: 40 slice(s)" <<<"$("$TESSERA" info "$MNT/fragmented")" || fail "the appends did not make 40 slices: $("$TESSERA" info "$MNT/fragmented" | grep chunk)"
# The file whose object was removed above cannot be compacted: named, gc
# goes on with the rest and exits 1.
if out=$("$TESSERA" gc "$META" --compact --delete 2>&1); then fail "gc --compact exits 0 with a broken file: $out"; fi
grep -q "cannot compact chunk 0 of /dir/.*victim" <<<"$out" || fail "gc --compact does not name the broken file: $out"
grep -q "1 chunk(s) could not be compacted" <<<"$out" || fail "gc --compact: $out"
grep -qE "^compacted [1-9][0-9]* of" <<<"$out" || fail "gc --compact: $out"
grep -q "chunk 0: 1 slice(s)" <<<"$("$TESSERA" info "$MNT/fragmented")" || fail "still fragmented after gc --compact"
echo 3 >/proc/sys/vm/drop_caches
cmp "$MNT/fragmented" "$WORK/fragmented.ref" || fail "gc --compact changed the file's bytes"
[ "$(count_of "pending deletion:")" = 0 ] || fail "the replaced slices are still pending after gc --compact --delete"
log "gc --compact: $(echo "$out" | grep "^compacted")"
rm -f "$MNT/dir/sub/victim" "$MNT/dir/victim-link"

log "destroy: refused with a wrong UUID, while mounted, without --yes; then every object and record goes"
uuid=$("$TESSERA" status "$META" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Setting"]["UUID"])')
expect_refused() {  # expect_refused WHAT PATTERN ARGS...: destroy fails, says PATTERN, changes nothing
  local what=$1 pattern=$2
  shift 2
  if "$TESSERA" destroy "$META" "$@" </dev/null >"$WORK/destroy.out" 2>&1; then fail "destroy $what succeeded"; fi
  grep -q "$pattern" "$WORK/destroy.out" || fail "destroy $what: $(cat "$WORK/destroy.out")"
  "$TESSERA" status "$META" >/dev/null || fail "destroy $what removed the volume"
}
expect_refused "while mounted" "mounted by 1 client" "$uuid" --yes
# Counted once unmounted: the files removed just above lose their objects in
# the mount's background, which would race the count.
unmount_volume
objects=$(find "$WORK/bucket/chunks" -type f | wc -l)
[ "$objects" -gt 0 ] || fail "no objects in the bucket before destroy"
expect_refused "with a wrong UUID" "not 00000000" 00000000-0000-0000-0000-000000000000 --yes
expect_refused "without --yes and no terminal" "add --yes" "$uuid"
[ "$(find "$WORK/bucket/chunks" -type f | wc -l)" = "$objects" ] || fail "a refused destroy deleted objects"
"$TESSERA" destroy "$META" "$uuid" --yes || fail "destroy"
[ "$(find "$WORK/bucket/chunks" -type f | wc -l)" = 0 ] || fail "objects left after destroy"
if "$TESSERA" status "$META" >/dev/null 2>&1; then fail "the volume is still there after destroy"; fi
log "destroy: $objects object(s) and the metadata removed; a new volume takes its place for what follows"
"$TESSERA" format "$META" e2e-vol "${STORE_ARGS[@]}" --block-size 64 >/dev/null
mount_volume
