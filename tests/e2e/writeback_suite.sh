# Suite "writeback" of run_e2e.sh (sourced: uses its TESSERA, META, MNT, WORK,
# mount_volume, unmount_volume, fail and log). Mount --writeback over a store
# whose uploads all fail (the fault-injecting wrapper, object/fault_store.h,
# through TESSERA_OBJECT_FAULTS): close() and fsync() return although nothing
# reached the bucket; the data is staged on the cache disk, readable, and
# survives a kill -9 of the client; the next mount reads it from the staging
# area and, once the store works, uploads every block; `umount --flush` waits
# for the uploads and leaves nothing staged.
log "writeback: data acknowledged while the store refuses every upload"
WB_CACHE=$WORK/wbcache
WB_DOWN="seed=1,error=1,ops=put"         # every PUT fails: the store is unreachable for writes
WB_SLOW="seed=2,delay_ms=300,ops=put"    # every PUT takes 300 ms

wb_has_object() {
  if declare -F obj_exists >/dev/null; then obj_exists "$1"; else [ -f "$WORK/bucket/$1" ]; fi
}
wb_packs() { find "$WB_CACHE" -path '*/rawstaging/*.pack' -type f 2>/dev/null | wc -l; }
wb_objects() { "$TESSERA" info "$@" | awk '/^ *object /{print $2}'; }
wb_present() {  # how many of the keys in file $1 are in the bucket
  local n=0 key
  while read -r key; do wb_has_object "$key" && n=$((n + 1)); done <"$1"
  echo "$n"
}
wb_staged() {  # staged blocks `tessera info` reports; waits up to 3 s for some (refreshed every second)
  local n=0
  for _ in $(seq 1 15); do
    n=$("$TESSERA" info "$1" | sed -n 's/.*writeback: \([0-9]*\) block.*/\1/p')
    [ "${n:-0}" -gt 0 ] && break
    sleep 0.2
  done
  echo "${n:-0}"
}
wb_check_files() {  # every file matches its copy in $WORK
  cmp "$WORK/wb-big" "$MNT/wb/big" || fail "$1: big file differs"
  cmp "$WORK/wb-patchy" "$MNT/wb/patchy" || fail "$1: patchy file differs"
  for i in $(seq 1 20); do cmp "$WORK/wb-s$i" "$MNT/wb/s$i" || fail "$1: small file s$i differs"; done
}

unmount_volume
TESSERA_OBJECT_FAULTS=$WB_DOWN mount_volume --writeback --cache-dir "$WB_CACHE"
grep -q "injecting faults" "$WORK/mount.log" || fail "the fault injection (TESSERA_OBJECT_FAULTS) is not active"
mkdir -p "$MNT/wb"
head -c 3000000 /dev/urandom >"$WORK/wb-big"
cp "$WORK/wb-big" "$MNT/wb/big"  # write() and close() returned
python3 - "$MNT/wb/patchy" "$WORK/wb-patchy" <<'PY' || fail "writing the patchy file"
import os, random, sys
random.seed(5)
data = bytearray(os.urandom(1000000))
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, bytes(data), 0)
for i in range(400):
    off, n = random.randrange(0, len(data) - 5000), random.randrange(1, 5000)
    b = os.urandom(n)
    os.pwrite(fd, b, off)
    data[off:off + n] = b
    if i % 100 == 99:
        os.fsync(fd)
os.close(fd)
open(sys.argv[2], "wb").write(data)
PY
for i in $(seq 1 20); do
  head -c $((i * 7000)) /dev/urandom >"$WORK/wb-s$i"
  cp "$WORK/wb-s$i" "$MNT/wb/s$i"
done
wb_objects "$MNT/wb/big" "$MNT/wb/patchy" "$MNT"/wb/s* >"$WORK/wb.objects"
total=$(wc -l <"$WORK/wb.objects")
[ "$total" -gt 50 ] || fail "expected many objects, tessera info lists $total"
[ "$(wb_present "$WORK/wb.objects")" = 0 ] || fail "objects reached the bucket although every upload fails"
[ "$(wb_packs)" -gt 0 ] || fail "nothing staged under $WB_CACHE"
[ "$(wb_staged "$MNT/wb/big")" -gt 0 ] || fail "tessera info shows no staged blocks"
# What `tessera status` on another host shows (a UTS namespace with another
# host name): the backlog the client stored with a heartbeat (every 10 s).
wb_remote_staged() {
  unshare --uts sh -c 'hostname tessera-elsewhere && exec "$0" status "$1"' "$TESSERA" "$META" |
    python3 -c 'import json, sys
w = [s["Writeback"] for s in json.load(sys.stdin)["Sessions"] if s["Host"] != "tessera-elsewhere"]
print(max([x["StagedBlocks"] for x in w if isinstance(x, dict)] or [0]))'
}
remote=0
for _ in $(seq 1 24); do
  remote=$(wb_remote_staged) || fail "tessera status failed"
  [ "$remote" -gt 0 ] && break
  sleep 0.5
done
[ "$remote" -gt 0 ] || fail "tessera status on another host shows no backlog 12 s after the writes"
echo 3 >/proc/sys/vm/drop_caches
wb_check_files "read back while the store is down"
log "writeback: kill -9 of the client; the next mount reads the staged blocks"
kill_client
TESSERA_OBJECT_FAULTS=$WB_DOWN mount_volume --writeback --cache-dir "$WB_CACHE"
grep -q "staged by an earlier client" "$WORK/mount.log" || fail "the new client did not find the staged blocks"
wb_check_files "after the crash, store still down"
[ "$(wb_present "$WORK/wb.objects")" = 0 ] || fail "objects reached the bucket although every upload fails"
log "writeback: a plain umount keeps the staged blocks"
unmount_volume
[ "$(wb_packs)" -gt 0 ] || fail "umount without --flush dropped the staged blocks"
log "writeback: store back; the next mount uploads every staged block"
mount_volume --writeback --cache-dir "$WB_CACHE"
for _ in $(seq 1 300); do
  [ "$(wb_present "$WORK/wb.objects")" = "$total" ] && break
  sleep 0.2
done
present=$(wb_present "$WORK/wb.objects")
[ "$present" = "$total" ] || fail "only $present of $total objects uploaded after the store came back"
wb_check_files "after the uploads"
log "writeback: fsx with --writeback and a small buffer (background commits, reads of staged blocks)"
unmount_volume
mount_volume --writeback --cache-dir "$WB_CACHE" --buffer-size 16
WB_FSX_N=6000
[ "${QUICK:-0}" = 1 ] && WB_FSX_N=1500
"$BIN/e2e_fsx" -N "$WB_FSX_N" -S 21 -b 65536 -l $((8 << 20)) "$MNT/wb-fsx" >"$WORK/wb-fsx.log" 2>&1 ||
  { tail -40 "$WORK/wb-fsx.log"; fail "fsx with --writeback"; }
tail -1 "$WORK/wb-fsx.log"
log "writeback: umount --flush waits for a slow store"
unmount_volume
TESSERA_OBJECT_FAULTS=$WB_SLOW mount_volume --writeback --cache-dir "$WB_CACHE"
head -c 20000000 /dev/urandom >"$WORK/wb-late"
cp "$WORK/wb-late" "$MNT/wb/late"
wb_objects "$MNT/wb/late" >"$WORK/wb-late.objects"
late=$(wc -l <"$WORK/wb-late.objects")
[ "$(wb_staged "$MNT/wb/late")" -gt 0 ] || fail "expected staged blocks behind a slow store right after close"
"$TESSERA" umount --flush "$MNT" || fail "umount --flush"
[ "$(wb_present "$WORK/wb-late.objects")" = "$late" ] || fail "umount --flush returned before every object was uploaded"
[ "$(wb_packs)" = 0 ] || fail "umount --flush left staged blocks: $(find "$WB_CACHE" -name '*.pack')"
mount_volume
cmp "$WORK/wb-late" "$MNT/wb/late" || fail "late file differs after umount --flush"
wb_check_files "after umount --flush, without writeback"
