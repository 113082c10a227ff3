# Sourced by run_e2e.sh (suite "observe"): metrics, the internal files and
# the commands built on them, through a real mount.
#  - counters move as a known workload says: N creates -> N FUSE creates and
#    at least N engine mknods; a cold read of a file -> as many GETs as it
#    has blocks; blocks written to a local bucket stay out of the memory
#    cache, blocks read go in;
#  - a real Prometheus server (Debian's prometheus) scrapes --metrics under
#    load and its query API shows plausible rates of creates and PUTs;
#  - .accesslog shows a reader the operations done, and records nothing once
#    closed (tessera_accesslog_readers back to 0);
#  - .stats/.config: root only, not listed, no password of the META-URL in
#    them nor in `tessera debug`'s archive;
#  - a user's own file named .stats; --internal-prefix;
#  - tessera stats / profile / debug; bad --metrics addresses and ports.
log "observe: metrics, internal files, stats/profile/debug"
unmount_volume
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MPORT=$(free_port)
mount_volume --metrics "127.0.0.1:$MPORT" --metrics-labels e2e=observe --cache-dir none
metric() {  # $1: a series selector as grep -F text; sums what matches in .stats (0 if none)
  awk -v s="$1" 'substr($0, 1, 1) != "#" && index($0, s) {t += $NF} END {printf "%d\n", t}' "$MNT/.stats"
}
series() {  # $1: metric name, $2: label text such as op="create" (0 if absent: nothing observed yet)
  awk -v n="$1{" -v l="$2" 'index($0, n) == 1 && index($0, l) {t += $NF} END {printf "%d\n", t}' "$MNT/.stats"
}
o=$MNT/observe
mkdir -p "$o"

log "observe: 50 creates -> 50 FUSE creates, >= 50 engine mknods"
mk0=$(series tessera_meta_op_duration_seconds_count 'op="mknod"')
fc0=$(series tessera_fuse_op_duration_seconds_count 'op="create"')
for i in $(seq 1 50); do : >"$o/f$i"; done
# A request is counted just after its reply (the closing requests of the
# last file can overtake it, on another worker): read again for up to 2 s
# while short (under ASan on a loaded machine the last one was seen missing).
for _ in $(seq 1 20); do
  fc1=$(series tessera_fuse_op_duration_seconds_count 'op="create"')
  [ $((fc1 - fc0)) -ge 50 ] && break
  sleep 0.1
done
mk1=$(series tessera_meta_op_duration_seconds_count 'op="mknod"')
[ $((fc1 - fc0)) -eq 50 ] || fail "FUSE creates counted $((fc1 - fc0)), want 50"
[ $((mk1 - mk0)) -ge 50 ] || fail "engine mknods counted $((mk1 - mk0)), want >= 50"
grep -q 'e2e="observe"' "$MNT/.stats" || fail "--metrics-labels missing from .stats"

log "observe: a cold read of a 4-block file costs 4 GETs"
head -c $((3 * 65536 + 1000)) /dev/urandom >"$o/cold"
unmount_volume
mount_volume --metrics "127.0.0.1:$MPORT" --cache-dir none
get() { series tessera_object_request_duration_seconds_count 'method="get"'; }
g0=$(get)
cat "$o/cold" >/dev/null
g1=$(get)
[ $((g1 - g0)) -eq 4 ] || fail "cold read of 4 blocks made $((g1 - g0)) GETs"

if [ "$STORAGE" != s3 ]; then
  log "observe: a local bucket's written blocks stay out of the memory cache; blocks read come in"
  membytes() { series tessera_blockcache_bytes 'cache="memory"'; }
  b0=$(membytes)
  head -c $((2 * 65536)) /dev/urandom >"$o/written"
  sync "$o/written"
  b1=$(membytes)
  [ "$b1" -eq "$b0" ] || fail "writing 2 blocks grew the memory cache from $b0 to $b1 bytes"
  dd if="$o/written" of=/dev/null bs=65536 iflag=direct status=none || fail "direct read of written"
  b2=$(membytes)
  [ "$b2" -eq $((b1 + 2 * 65536)) ] || fail "reading 2 whole blocks left the memory cache at $b2 bytes, want $((b1 + 2 * 65536))"
fi

log "observe: the same numbers at http://127.0.0.1:$MPORT/metrics"
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$WORK/metrics.txt" || fail "GET /metrics"
grep -q '^tessera_fuse_op_duration_seconds_count{.*op="read"}' "$WORK/metrics.txt" ||
  fail "/metrics does not serve the FUSE counters"

log "observe: a real Prometheus scrapes the mount under load"
PPORT=$(free_port)
mkdir -p "$WORK/prom"
cat >"$WORK/prom/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tessera
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
EOF
prometheus --config.file="$WORK/prom/prometheus.yml" --storage.tsdb.path="$WORK/prom/data" \
  --web.listen-address="127.0.0.1:$PPORT" >"$WORK/prom/log" 2>&1 &
PROM_PID=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null || { tail "$WORK/prom/log"; fail "prometheus did not start"; }
mkdir -p "$o/load"
(
  end=$((SECONDS + 12)); n=0
  while [ $SECONDS -lt $end ]; do n=$((n + 1)); echo "$n" >"$o/load/f$n"; done
  echo "$n" >"$WORK/prom/created"
) &
LOAD=$!
sleep 9
promq() {
  curl -sf "http://127.0.0.1:$PPORT/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(float(r[0]["value"][1]) if r else 0.0)'
}
creates=$(promq 'sum(rate(tessera_fuse_op_duration_seconds_count{op="create",e2e!="x"}[5s]))')
puts=$(promq 'sum(rate(tessera_object_request_duration_seconds_count{method="put"}[5s]))')
up=$(promq 'up{job="tessera"}')
wait $LOAD
kill $PROM_PID 2>/dev/null || true; wait $PROM_PID 2>/dev/null || true
created=$(cat "$WORK/prom/created")
actual=$(python3 -c "print($created / 12)")
log "observe: prometheus: up $up, creates/s $creates, PUTs/s $puts; the load did $actual creates/s"
python3 - "$creates" "$puts" "$actual" "$up" <<'PY' || fail "implausible rates from Prometheus"
import sys
creates, puts, actual, up = map(float, sys.argv[1:])
# Each file gets one small write: one PUT per create. Rates over 5 s of 1 s
# scrapes of a load whose speed varies: within a factor of 3.
ok = up == 1 and actual > 0 and actual / 3 <= creates <= actual * 3 and creates / 3 <= puts <= creates * 3
print("ok" if ok else "not plausible")
sys.exit(0 if ok else 1)
PY

log "observe: .accesslog shows a reader's operations, and nothing once closed"
echo hello >"$o/logged"
# The kernel forgets its entry (kept for minutes with coherent caches): the
# stat below looks it up.
sync
echo 2 >/proc/sys/vm/drop_caches
cat "$MNT/.accesslog" >"$WORK/accesslog.txt" &
AL=$!
for _ in $(seq 1 50); do [ "$(metric tessera_accesslog_readers)" -ge 1 ] && break; sleep 0.1; done
stat "$o/logged" >/dev/null
cat "$o/logged" >/dev/null
sleep 0.5
kill $AL 2>/dev/null || true; wait $AL 2>/dev/null || true
grep -q 'lookup ([0-9]*,"logged"): OK' "$WORK/accesslog.txt" || { head "$WORK/accesslog.txt"; fail "no lookup of 'logged' in .accesslog"; }
grep -q '\] read ([0-9]*,[0-9]*,0): OK <' "$WORK/accesslog.txt" || fail "no read in .accesslog"
grep -q '\[uid:0,gid:0,pid:[0-9]*\]' "$WORK/accesslog.txt" || fail "no caller in .accesslog"
for _ in $(seq 1 50); do [ "$(metric tessera_accesslog_readers)" -eq 0 ] && break; sleep 0.1; done
[ "$(metric tessera_accesslog_readers)" -eq 0 ] || fail "the access log still has a reader after it was closed"

log "observe: internal files are root's and unlisted"
listing=$(ls -a "$MNT")
grep -qx '.stats' <<<"$listing" && fail ".stats is listed"
grep -q '"mount_point"' "$MNT/.config" || fail ".config has no mount_point"
for f in .stats .config .accesslog; do
  if su nobody -s /bin/sh -c "cat '$MNT/$f'" >/dev/null 2>&1; then fail "nobody read $f"; fi
done
mkdir -p "$WORK/debug-out"
"$TESSERA" debug "$MNT" --out "$WORK/debug-out" --seconds 1 >"$WORK/debug-out/name" || fail "tessera debug"
archive=$(cat "$WORK/debug-out/name")
listing=$(tar tzf "$archive")
for f in version.txt config.json stats-start.txt stats-after-1s.txt accesslog.txt log-tail.txt health.json; do
  grep -q "/$f\$" <<<"$listing" || fail "debug archive lacks $f"
done
password=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlsplit(sys.argv[1]).password or "")' "$META")
if [ -n "$password" ]; then
  log "observe: the META-URL's password is in none of .config, .stats, the debug archive"
  ! grep -qF "$password" "$MNT/.config" || fail "password in .config"
  ! grep -qF "$password" "$MNT/.stats" || fail "password in .stats"
  mkdir -p "$WORK/debug-x" && tar xzf "$archive" -C "$WORK/debug-x"
  ! grep -rqF "$password" "$WORK/debug-x" || fail "password in the debug archive"
else
  log "observe: (this META-URL has no password: the secret check runs on PostgreSQL)"
fi

log "observe: tessera stats and profile"
out=$("$TESSERA" stats "$MNT" --count 2 --interval 0.5 --schema fmo)
[ "$(echo "$out" | wc -l)" -eq 4 ] || { echo "$out"; fail "stats: want 2 header lines and 2 lines"; }
grep -q 'fuse' <<<"$out" || fail "stats header"
(sleep 0.5; for i in $(seq 1 30); do : >"$o/p$i"; done) &
out=$("$TESSERA" profile "$MNT" --duration 2)
wait
grep -q '^create  *30 ' <<<"$out" || { echo "$out"; fail "profile: want 30 creates"; }
out=$("$TESSERA" stats /tmp --count 1 2>&1) && fail "stats outside a mount succeeded"
case $out in *"not in a Tessera mount"*) ;; *) fail "stats outside a mount: unclear error: $out" ;; esac

log "observe: a user's own .stats; --internal-prefix"
su nobody -s /bin/sh -c "echo mine >'$MNT/.stats'" || fail "nobody could not create .stats"
[ "$(cat "$MNT/.stats")" = mine ] || fail "root does not see the user's .stats"
[ "$(su nobody -s /bin/sh -c "cat '$MNT/.stats'")" = mine ] || fail "nobody does not see their .stats"
listing=$(ls -a "$MNT")
grep -qx '.stats' <<<"$listing" || fail "the user's .stats is not listed"
unmount_volume
mount_volume --internal-prefix .tessera-
grep -q '^tessera_fuse_op_duration_seconds_count' "$MNT/.tessera-stats" || fail "--internal-prefix: no metrics"
[ "$(cat "$MNT/.stats")" = mine ] || fail "the user's .stats changed"
out=$("$TESSERA" stats "$MNT" --count 1 --interval 0.2 --internal-prefix .tessera- | wc -l)
[ "$out" -eq 3 ] || fail "stats --internal-prefix"
rm "$MNT/.stats"

log "observe: --metrics on a busy port or a bad address fails at mount time"
unmount_volume
BUSY=$(free_port)
python3 -c 'import socket,time,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(30)' "$BUSY" &
HOLD=$!
for _ in $(seq 1 50); do ss -ltn | grep -q ":$BUSY " && break; sleep 0.1; done
out=$("$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" --metrics "127.0.0.1:$BUSY" 2>&1) &&
  fail "mount with --metrics on a busy port succeeded"
case $out in *"cannot listen"*) ;; *) fail "busy port: unclear error: $out" ;; esac
kill $HOLD 2>/dev/null || true; wait $HOLD 2>/dev/null || true
mountpoint -q "$MNT" && fail "mounted anyway"
out=$("$TESSERA" mount "$META" "$MNT" -d --log "$WORK/mount.log" --metrics "not-an-address" 2>&1) &&
  fail "mount with a bad --metrics succeeded"
case $out in *"expected HOST:PORT"*) ;; *) fail "bad address: unclear error: $out" ;; esac
mountpoint -q "$MNT" && fail "mounted anyway"
mount_volume
rm -rf "$o"
