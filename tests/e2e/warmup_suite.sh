# Sourced by run_e2e.sh (suite "warmup"): `tessera warmup` through the
# mount's control channel, with a disk cache. --evict empties the cache
# (--check says 0 %), warmup fills it (--check says 100 %), and a cold read
# (page cache dropped) then fetches no object: with a local bucket, the
# bucket is moved away meanwhile and the data still reads back; on S3 the
# server's log counts no GET. After --evict the same read needs the store
# (which shows the check can fail). A user cannot warm up a file it may not
# read. TESSERA_E2E_WARMUP_MB sizes the big file (64; 16 with
# TESSERA_E2E_QUICK; 1024 for the run in docs/benchmarks.md).
MB=${TESSERA_E2E_WARMUP_MB:-$([ "${TESSERA_E2E_QUICK:-0}" = 1 ] && echo 16 || echo 64)}
unmount_volume
mount_volume --cache-dir "$WORK/cache" --cache-size $((MB * 4 + 256))
log "warmup: $MB MiB and small files, evict / load / check, then a cold read without the store"
w=$MNT/warm
mkdir -p "$w/sub"
head -c $((MB << 20)) /dev/urandom >"$w/big"
for i in $(seq 1 20); do head -c $((i * 3000)) /dev/urandom >"$w/sub/s$i"; done
(cd "$w" && find . -type f -exec md5sum {} + | LC_ALL=C sort -k2) >"$WORK/warm.sums"

cached_pct() { "$TESSERA" warmup --check "$w" | sed -n 's/.*(\([0-9.]*\)%)$/\1/p'; }
out=$("$TESSERA" warmup --evict "$w" 2>&1) || fail "warmup --evict: $out"
[ "$(cached_pct)" = "0.0" ] || fail "after --evict: $("$TESSERA" warmup --check "$w")"
out=$("$TESSERA" warmup "$w" --threads 4 2>&1) || fail "warmup: $out"
grep -q "warmed up $w: 21 files" <<<"$out" || fail "warmup said: $out"
[ "$(cached_pct)" = "100.0" ] || fail "after warmup: $("$TESSERA" warmup --check "$w")"

gets() { grep -c "GET /$S3_BUCKET/chunks/" "$TESSERA_TEST_S3_DIR/proxy-server.log" || true; }
# Reads the tree with the page cache dropped: "ok", or why not.
cold_read() {
  echo 3 >/proc/sys/vm/drop_caches
  (cd "$w" && md5sum --quiet -c "$WORK/warm.sums" >/dev/null 2>&1) && echo ok || echo "read failed"
}
store_off() { if [ "$STORAGE" = file ]; then mv "$WORK/bucket" "$WORK/bucket.away"; else before=$(gets); fi; }
store_on() {  # prints how many GETs the store served meanwhile ("-" for a local bucket moved away)
  if [ "$STORAGE" = file ]; then mv "$WORK/bucket.away" "$WORK/bucket"; echo -; else echo $(($(gets) - before)); fi
}
if [ "$STORAGE" = s3 ]; then
  [ -n "${TESSERA_TEST_S3_DIR:-}" ] || fail "TESSERA_TEST_S3_DIR is not set (tests/tools/with-s3.sh sets it)"
  [ "$(gets)" -gt 0 ] || fail "the S3 server's log counts no GET at all: cannot count them"
fi
store_off
got=$(cold_read)
fetched=$(store_on)
[ "$got" = ok ] || fail "a cold read after warmup needed the object store ($got)"
[ "$fetched" = - ] || [ "$fetched" -eq 0 ] || fail "a cold read after warmup made $fetched GET(s)"

"$TESSERA" warmup --evict "$w" >/dev/null 2>&1 || fail "warmup --evict"
store_off
got=$(cold_read)
fetched=$(store_on)
if [ "$STORAGE" = file ]; then
  [ "$got" != ok ] || fail "after --evict, a read without the store still worked: the check above proves nothing"
else
  [ "$fetched" -gt 0 ] || fail "after --evict, a cold read made no GET: the check above proves nothing"
fi

log "warmup: only what the caller may read"
head -c 100000 /dev/urandom >"$w/secret" && chmod 600 "$w/secret"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$TESSERA" warmup "$w/secret" 2>&1) &&
  fail "a user warmed up a file it may not read: $out"
case $out in *"ermission denied"*) ;; *) fail "unclear refusal: $out" ;; esac
out=$("$TESSERA" warmup /tmp 2>&1) && fail "warmup outside a mount succeeded"
case $out in *"not inside a Tessera mount"*) ;; *) fail "unclear error outside a mount: $out" ;; esac
rm -rf "$w"
unmount_volume
mount_volume
