# Sourced by run_e2e.sh (suite "quota"): quotas through real mounts. A
# directory quota of 10 MiB / 100 inodes: the 101st create, a write past
# 10 MiB, a rename of a big file into the tree, a hard link and a
# copy_file_range into it fail with EDQUOT, and df inside it shows the quota;
# nested quotas both apply; a user quota holds for an unprivileged uid and not
# for root; a second mount of the volume refuses within one second of the
# first one reaching the limit; quota check --repair recomputes the usage
# after a client was killed.
QUOTA_SYNC=1  # seconds: every client has loaded a new quota (0.4 s) and sent its usage (0.4 s)
expect_edquot() {  # $1: what; the rest: the command
  local what=$1 out
  shift
  out=$("$@" 2>&1) && fail "$what: passed the quota"
  case $out in *"Disk quota exceeded"* | *"quota"*) ;; *) fail "$what: not EDQUOT: $out" ;; esac
}
quota_used() {  # --path P | --uid N: the inodes recorded, when they agree with the tree
  "$TESSERA" quota check "$META" "$@" | sed -n 's/.*ok: .*, \([0-9]*\) inodes/\1/p'
}

log "quota: a directory quota of 10 MiB / 100 inodes"
qd=$MNT/quota-q
mkdir -p "$qd" "$MNT/quota-out"
"$TESSERA" quota set "$META" --path /quota-q --capacity 0.009765625 --inodes 100 >/dev/null
out=$("$TESSERA" quota get "$META" --path /quota-q)
case $out in *"10.0 MiB"*"of 100"*) ;; *) fail "quota get: $out" ;; esac
sleep "$QUOTA_SYNC"
for i in $(seq 1 100); do : >"$qd/f$i" || fail "create $i of 100 under a 100-inode quota failed"; done
expect_edquot "the 101st create" touch "$qd/f101"
expect_edquot "the 101st mkdir" mkdir "$qd/d101"
[ "$(df --output=iused,itotal "$qd" | tail -1 | tr -s ' ')" = " 100 100" ] ||
  fail "df -i inside the quota: $(df -i "$qd" | tail -1)"
rm -f "$qd"/f*
log "quota: space: a write past 10 MiB, df, a rename, a hard link and copy_file_range into the tree"
expect_edquot "a 20 MiB write under a 10 MiB quota" dd if=/dev/zero of="$qd/big" bs=1M count=20
size=$(stat -c %s "$qd/big")
[ "$size" -le 10485760 ] || fail "the file grew past the quota: $size bytes"
[ "$(df -B1 --output=size "$qd" | tail -1 | tr -d ' ')" = 10485760 ] || fail "df inside the quota: $(df -B1 "$qd" | tail -1)"
[ "$(df -B1 --output=size "$MNT" | tail -1 | tr -d ' ')" != 10485760 ] || fail "df of the root shows the directory's quota"
rm "$qd/big"
head -c 6000000 /dev/zero >"$MNT/quota-out/big"
head -c 6000000 /dev/zero >"$qd/half"
expect_edquot "a rename of 6 MB into a tree holding 6 of 10 MiB" mv "$MNT/quota-out/big" "$qd/big"
[ -f "$MNT/quota-out/big" ] || fail "the refused rename lost its source"
expect_edquot "a hard link of 6 MB into the tree" ln "$MNT/quota-out/big" "$qd/link"
expect_edquot "copy_file_range of 6 MB into the tree" python3 -c '
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY)
dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o644)
left = os.fstat(src).st_size
while left > 0:
    n = os.copy_file_range(src, dst, left)
    if n == 0: break
    left -= n' "$MNT/quota-out/big" "$qd/copy"
rm -f "$qd/copy" "$qd/half"
mv "$MNT/quota-out/big" "$qd/big" || fail "a rename within the quota failed"
mv "$qd/big" "$MNT/quota-out/big" || fail "a rename out of the tree failed"

log "quota: nested quotas both apply"
mkdir "$qd/sub"
"$TESSERA" quota set "$META" --path /quota-q/sub --inodes 5 --capacity 1 >/dev/null
sleep "$QUOTA_SYNC"
for i in 1 2 3 4 5; do : >"$qd/sub/f$i" || fail "create $i of 5 under the nested quota failed"; done
expect_edquot "the 6th create under a 5-inode nested quota" touch "$qd/sub/f6"
rm "$qd/sub"/f*
expect_edquot "an 11 MiB write under a 1 GiB quota inside a 10 MiB one" dd if=/dev/zero of="$qd/sub/big" bs=1M count=11
rm -f "$qd/sub/big"
"$TESSERA" quota delete "$META" --path /quota-q/sub >/dev/null
out=$("$TESSERA" quota list "$META")
case $out in *"/quota-q/sub"*) fail "quota list after delete: $out" ;; *"/quota-q "*) ;; *) fail "quota list: $out" ;; esac

log "quota: two mounts refuse within one second of the limit"
MNT2=$WORK/mnt2
mkdir -p "$MNT2"
"$TESSERA" mount "$META" "$MNT2" -d --log "$WORK/mount2.log"
for i in $(seq 1 50); do : >"$qd/a$i"; done
sleep "$QUOTA_SYNC"
for i in $(seq 1 40); do : >"$MNT2/quota-q/b$i" || fail "the second mount's create $i failed"; done
sleep "$QUOTA_SYNC"
# 91 inodes now (sub counts): the first mount takes the rest, the second
# must refuse one second later.
for i in $(seq 51 59); do : >"$qd/a$i" || fail "the first mount's create $i failed"; done
expect_edquot "the first mount's 101st inode" touch "$qd/a60"
sleep "$QUOTA_SYNC"
expect_edquot "the second mount, a second after the first reached the limit" touch "$MNT2/quota-q/b41"
expect_edquot "the second mount, a write" dd if=/dev/zero of="$MNT2/quota-q/b1" bs=1M count=11

log "quota: quota check; a client killed before it sent its usage; check --repair"
rm -f "$qd"/a* "$qd"/b*
sleep "$QUOTA_SYNC"
"$TESSERA" quota check "$META" --path /quota-q >/dev/null || fail "quota check after a quiet second: $("$TESSERA" quota check "$META" --path /quota-q 2>&1)"
for i in $(seq 1 30); do head -c 10000 /dev/zero >"$MNT2/quota-q/k$i"; done
pid=$(pgrep -f "tessera mount .* $MNT2 -d" | head -1)
[ -n "$pid" ] || fail "cannot find the second mount's process"
kill -9 "$pid"
umount -l "$MNT2" 2>/dev/null || true
if ! "$TESSERA" quota check "$META" --path /quota-q >"$WORK/qcheck" 2>&1; then
  grep -q "the tree holds" "$WORK/qcheck" || fail "quota check: $(cat "$WORK/qcheck")"
fi
"$TESSERA" quota check "$META" --repair >/dev/null || fail "quota check --repair"
"$TESSERA" quota check "$META" >/dev/null || fail "quota check after --repair: $("$TESSERA" quota check "$META" 2>&1)"
want=$(($(find "$qd" -mindepth 1 | wc -l)))
[ "$(quota_used --path /quota-q)" = "$want" ] || fail "inodes after repair: $(quota_used --path /quota-q), find says $want"

log "quota: a user quota for an unprivileged uid (not root's files)"
uq=$MNT/quota-user
mkdir "$uq" && chown 65534:65534 "$uq"
"$TESSERA" quota set "$META" --uid 65534 --inodes 1000000 >/dev/null
used=$(quota_used --uid 65534)
[ -n "$used" ] || fail "quota check --uid: $("$TESSERA" quota check "$META" --uid 65534 2>&1)"
"$TESSERA" quota set "$META" --uid 65534 --inodes $((used + 5)) --capacity 0.00390625 >/dev/null  # 4 MiB
sleep "$QUOTA_SYNC"
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
for i in 1 2 3 4 5; do as_user touch "$uq/u$i" || fail "the user's create $i of 5 failed"; done
expect_edquot "the user's 6th inode" as_user touch "$uq/u6"
: >"$uq/root-file" || fail "root's create in the user's directory was refused by the user's quota"
rm "$uq/u5"
expect_edquot "the user's 5 MiB write under 4 MiB" as_user dd if=/dev/zero of="$uq/u1" bs=1M count=5
chown 0:0 "$uq/u1" && rm "$uq/u2" || fail "chown / rm"
as_user touch "$uq/u7" "$uq/u8" || fail "inodes given back by chown and rm were not freed"
"$TESSERA" quota delete "$META" --uid 65534 >/dev/null
"$TESSERA" quota delete "$META" --path /quota-q >/dev/null
out=$("$TESSERA" quota get "$META" --path /nope 2>&1) && fail "quota get of a missing path succeeded"
case $out in *"No such file"*) ;; *) fail "unclear error for a missing path: $out" ;; esac
out=$("$TESSERA" quota set "$META" --path /quota-q 2>&1) && fail "quota set without a limit succeeded"
rm -rf "$qd" "$uq" "$MNT/quota-out"
