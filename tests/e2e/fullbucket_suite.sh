# Sourced by run_e2e.sh (suite "fullbucket"): a volume whose bucket lives on a
# 24 MiB file system. A 40 MiB write fails at close with ENOSPC; then
#   - the file reads back as it was committed (empty) at once, on this host,
#     whatever the kernel cached while the write went on;
#   - the blocks the failed write uploaded are deleted (the bucket is empty
#     again within seconds), without deleting or remounting anything;
#   - a later 10 MiB write fits and reads back;
#   - fsck is clean.
[ "$STORAGE" = file ] || fail "fullbucket needs the file storage"
SMALL=$WORK/smallfs
FULLMNT=$WORK/fullmnt
mkdir -p "$SMALL" "$FULLMNT"
mount -t tmpfs -o size=24m tmpfs "$SMALL" || fail "cannot mount a small tmpfs for the bucket"
FULLMETA="sqlite3://$WORK/full.db"
"$TESSERA" format "$FULLMETA" full-vol --bucket "$SMALL/bucket" --trash-days 0 >/dev/null || fail "format on the small bucket"
"$TESSERA" mount "$FULLMETA" "$FULLMNT" -d --log "$WORK/mount.log" || fail "mount on the small bucket"
bucket_kib() { du -sk "$SMALL/bucket" | cut -f1; }

log "a 40 MiB write into a 24 MiB bucket fails, and leaves nothing behind"
out=$(python3 - "$FULLMNT/big" <<'PY'
import os, sys
p = sys.argv[1]
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
err = 0
try:
    for _ in range(40):
        os.write(fd, os.urandom(1 << 20))
except OSError as e:
    err = e.errno
try:
    os.close(fd)
except OSError as e:
    err = err or e.errno
st = os.stat(p)
with open(p, "rb") as f:
    n = len(f.read())
print(err, st.st_size, n)
PY
) || fail "the write script failed"
read -r err size readback <<<"$out"
log "close/write errno $err, size right after $size, bytes read back $readback"
[ "$err" = 28 ] || fail "a write that cannot fit must fail with ENOSPC (got errno $err)"
[ "$size" = 0 ] || fail "the size of a file whose commit failed is $size, want 0 (the kernel kept the discarded size)"
[ "$readback" = 0 ] || fail "$readback bytes of a failed write read back (the kernel kept the discarded pages)"
for _ in $(seq 1 50); do [ "$(bucket_kib)" -lt 1024 ] && break; sleep 0.2; done
[ "$(bucket_kib)" -lt 1024 ] || fail "the failed write left $(bucket_kib) KiB of blocks in the bucket"

log "after the failure, a 10 MiB file fits and reads back"
head -c $((10 << 20)) /dev/urandom >"$WORK/ten"
cp "$WORK/ten" "$FULLMNT/ten" || fail "a 10 MiB write after the failed one"
echo 3 >/proc/sys/vm/drop_caches
cmp "$WORK/ten" "$FULLMNT/ten" || fail "the 10 MiB file reads back wrong"
rm -f "$FULLMNT/big"
"$TESSERA" umount "$FULLMNT" || fail "umount of the small-bucket volume"
"$TESSERA" fsck "$FULLMETA" || fail "fsck of the small-bucket volume"
umount "$SMALL"
