#!/usr/bin/env bash
# tessera dump / load end to end, across the three engines on real servers
# (run under tests/tools/with-redis.sh and with-postgres.sh):
#   a tree with hard links, symlinks, xattrs, sparse files, a big file and
#   10,000 small files is copied into a SQLite volume, dumped (gzipped),
#   loaded into Redis, dumped, loaded into PostgreSQL, dumped, loaded into
#   SQLite again: every dump is identical to the first, and each loaded volume
#   mounts, shows the same tree (inode numbers, modes, owners, link counts,
#   sizes, times, xattrs) and passes `diff -r` against the source.
#   Then bad input: truncated, corrupted, newer-version dumps, a non-empty
#   engine, a missing volume, Ctrl-C: a clear error, non-zero exit, nothing
#   changed.
# usage: dump_suite.sh TESSERA   (TESSERA_E2E_QUICK=1: a 40 MiB big file)
set -euo pipefail
T=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
REDIS=${TESSERA_TEST_REDIS_URL:?run under tests/tools/with-redis.sh}
PG=${TESSERA_TEST_PG_URL:?run under tests/tools/with-postgres.sh}
BIG_MIB=200
[ "${TESSERA_E2E_QUICK:-0}" = 1 ] && BIG_MIB=40
WORK=$(mktemp -d /tmp/tessera-dump.XXXXXX)
MNT=$WORK/mnt
SRC=$WORK/src
mkdir -p "$MNT" "$SRC"
log() { printf '[dump] %s\n' "$*"; }
fail() {
  echo "[dump] FAILED: $*" >&2
  tail -20 "$WORK/mount.log" >&2 2>/dev/null || true
  exit 1
}
cleanup() {
  if mountpoint -q "$MNT"; then "$T" umount "$MNT" -f || umount -l "$MNT" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mount_vol() { "$T" mount "$1" "$MNT" -d --log "$WORK/mount.log" --enable-xattr >/dev/null; }
umount_vol() { "$T" umount "$MNT"; }
# A listing of everything about the tree that must survive (not atime).
listing() {
  (cd "$1" && find . -printf '%p %i %y %m %U %G %n %s %T@ %l\n' | LC_ALL=C sort)
  (cd "$1" && getfattr -R -h -d -m - . 2>/dev/null | grep -av '^$' || true)
}

log "source tree: ${BIG_MIB} MiB file, sparse files, 10,000 small files, links, xattrs, odd names"
head -c $((BIG_MIB << 20)) /dev/urandom >"$SRC/big"
truncate -s 3G "$SRC/sparse"
echo start | dd of="$SRC/sparse" conv=notrunc status=none
echo middle | dd of="$SRC/sparse" bs=1 seek=$((100 << 20)) conv=notrunc status=none
echo far | dd of="$SRC/sparse" bs=1 seek=$(((2 << 30) + 12345)) conv=notrunc status=none
truncate -s 70M "$SRC/holes-only"
python3 - "$SRC/small" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(10):
    os.makedirs(f"{root}/d{d}")
    for i in range(1000):
        with open(f"{root}/d{d}/f{i}", "wb") as f:
            f.write(os.urandom(i % 97) + str(i).encode())
PY
mkdir -p "$SRC/links" "$SRC/deep/a/b/c/d/e/f/g/h" "$SRC/empty-dir"
ln "$SRC/small/d0/f1" "$SRC/links/h1"
ln "$SRC/small/d0/f1" "$SRC/links/h2"
ln -s ../small/d0/f2 "$SRC/links/rel"
ln -s /absolute/dangling "$SRC/links/dangling"
echo deep >"$SRC/deep/a/b/c/d/e/f/g/h/file"
echo named >"$SRC/with space & ünïcode"
echo bytes >"$SRC/$(printf 'latin1-\xe9')"
mkfifo "$SRC/fifo"
setfattr -n user.text -v "hello" "$SRC/big"
setfattr -n user.bin -v 0x00ff10 "$SRC/links/h1"
setfattr -n user.dir -v yes "$SRC/deep"
chmod 1777 "$SRC/empty-dir"
chmod 4755 "$SRC/deep/a/b/c/d/e/f/g/h/file"
chown -R 1000:1000 "$SRC/small/d3"

"$T" format "sqlite3://$WORK/a.db" dumpvol --bucket "$WORK/bucket" >/dev/null
mount_vol "sqlite3://$WORK/a.db"
cp -a "$SRC/." "$MNT/"
listing "$MNT" >"$WORK/tree-source"
umount_vol
[ "$(grep -c . "$WORK/tree-source")" -gt 10000 ] || fail "the source listing is too short"

log "dump SQLite (gzipped), the dump parses with jq"
"$T" dump "sqlite3://$WORK/a.db" "$WORK/d1.json.gz" || fail "dump of SQLite"
gzip -dc "$WORK/d1.json.gz" >"$WORK/d1.json"
jq -c . "$WORK/d1.json" >/dev/null || fail "the dump is not JSON that jq parses"
inodes=$(jq -r 'select(.end) | .end.inodes' "$WORK/d1.json")
[ "$inodes" -gt 10000 ] || fail "the dump counts $inodes inodes"
log "$inodes inodes"

log "SQLite -> Redis -> PostgreSQL -> SQLite, each dump identical to the first"
# ... but for the slice counter, which each load moves 2^40 on (ids the
# source handed out after the dump are never handed out again).
next_slice() { head -n 1 "$1" | jq -r '.counters.nextSlice'; }
same_dump() {  # DUMP LOADS: DUMP is d1.json loaded LOADS times
  [ "$(next_slice "$1")" = $(( $(next_slice "$WORK/d1.json") + $2 * (1 << 40) )) ] ||
    fail "slice counter $(next_slice "$1") after $2 load(s) of one at $(next_slice "$WORK/d1.json")"
  cmp <(tail -n +2 "$WORK/d1.json") <(tail -n +2 "$1") &&
    cmp <(head -n 1 "$WORK/d1.json" | jq -cS 'del(.counters.nextSlice)') <(head -n 1 "$1" | jq -cS 'del(.counters.nextSlice)')
}
"$T" load "$REDIS" "$WORK/d1.json.gz" || fail "load into Redis"
"$T" dump "$REDIS" "$WORK/d2.json" || fail "dump of Redis"
same_dump "$WORK/d2.json" 1 || fail "the Redis dump differs from the first"
"$T" load "$PG" "$WORK/d2.json" || fail "load into PostgreSQL"
"$T" dump "$PG" - --gzip >"$WORK/d3.json.gz" || fail "dump of PostgreSQL"
gzip -dc "$WORK/d3.json.gz" >"$WORK/d3.json"
same_dump "$WORK/d3.json" 2 || fail "the PostgreSQL dump differs from the first"
"$T" load "sqlite3://$WORK/b.db" - <"$WORK/d3.json.gz" || fail "load into SQLite from stdin"
"$T" dump "sqlite3://$WORK/b.db" "$WORK/d4.json" || fail "dump of the second SQLite volume"
same_dump "$WORK/d4.json" 3 || fail "the second SQLite dump differs from the first"

for url in "$REDIS" "$PG" "sqlite3://$WORK/b.db"; do
  name=${url%%:*}
  log "$name: fsck, mount, same tree, diff -r against the source"
  "$T" fsck "$url" >/dev/null || fail "fsck of the volume loaded into $name"
  mount_vol "$url"
  listing "$MNT" >"$WORK/tree-$name"
  diff "$WORK/tree-source" "$WORK/tree-$name" >&2 || fail "the tree loaded into $name differs"
  diff -r --no-dereference -x fifo -x .trash "$SRC" "$MNT" || fail "diff -r of the volume loaded into $name"
  [ -p "$MNT/fifo" ] || fail "the fifo is gone in $name"
  # New files get fresh inode numbers and slices, never those of loaded files.
  echo new >"$MNT/new-file"
  ino=$(stat -c %i "$MNT/new-file")
  grep -aq " $ino " "$WORK/tree-source" && fail "$name reused inode $ino"
  rm "$MNT/new-file"
  umount_vol
  "$T" dump "$url" "$WORK/after-$name.json" 2>/dev/null || fail "dump of $name after use"
done

log "bad input: a clear error, non-zero exit, nothing changed"
rows() { sqlite3 "$1" 'SELECT count(*) FROM kv' 2>/dev/null || echo 0; }
expect_fail() {  # WHAT PATTERN CMD...: CMD fails with a message matching PATTERN
  local what=$1 pattern=$2
  shift 2
  local out
  if out=$("$@" 2>&1); then fail "$what: succeeded"; fi
  grep -qE "$pattern" <<<"$out" || fail "$what: unclear error: $out"
  log "  $what: $(echo "$out" | tail -1 | cut -c1-150)"
}
head -c $(($(stat -c %s "$WORK/d1.json") / 2)) "$WORK/d1.json" >"$WORK/truncated.json"
expect_fail "truncated dump" "line|truncated" "$T" load "sqlite3://$WORK/c.db" "$WORK/truncated.json"
[ "$(rows "$WORK/c.db")" = 0 ] || fail "a failed load left records"
head -n 200 "$WORK/d1.json" >"$WORK/short.json"
expect_fail "dump cut at a line end" "truncated" "$T" load "sqlite3://$WORK/c.db" "$WORK/short.json"
cp "$WORK/d1.json.gz" "$WORK/corrupt.json.gz"
printf 'garbage!' | dd of="$WORK/corrupt.json.gz" bs=1 seek=$(($(stat -c %s "$WORK/d1.json.gz") / 2)) conv=notrunc status=none
expect_fail "corrupted gzip" "reading|line|damaged" "$T" load "sqlite3://$WORK/c.db" "$WORK/corrupt.json.gz"
sed '1s/"tessera_dump":1/"tessera_dump":9/' "$WORK/d1.json" >"$WORK/newer.json"
expect_fail "newer format version" "version 9" "$T" load "sqlite3://$WORK/c.db" "$WORK/newer.json"
sed '50s/"nlink":1/"nlink":"one"/' "$WORK/d1.json" >"$WORK/typo.json"
expect_fail "wrong value type" "line 50" "$T" load "sqlite3://$WORK/c.db" "$WORK/typo.json"
[ "$(rows "$WORK/c.db")" = 0 ] || fail "a failed load left records"
expect_fail "not a dump" "not a Tessera metadata dump|line 1" "$T" load "sqlite3://$WORK/c.db" /etc/hostname
expect_fail "missing file" "No such file" "$T" load "sqlite3://$WORK/c.db" "$WORK/nothing.json"
expect_fail "non-empty engine" "not empty" "$T" load "$REDIS" "$WORK/d1.json"
"$T" dump "$REDIS" - | cmp "$WORK/after-redis.json" - || fail "a refused load changed the Redis volume"
expect_fail "dump of a missing volume" "no volume" "$T" dump "sqlite3://$WORK/none.db" "$WORK/none.json"
[ ! -e "$WORK/none.json" ] && [ ! -e "$WORK/none.db" ] || fail "a failed dump left files"
expect_fail "dump of a missing subdir" "No such file|not found|ENOENT" "$T" dump "sqlite3://$WORK/a.db" "$WORK/sub.json" --subdir /nope
[ ! -e "$WORK/sub.json" ] && [ ! -e "$WORK/sub.json.tmp" ] || fail "a failed dump left a file"

log "Ctrl-C during a load of 300,000 inodes: interrupted, the engine left empty"
python3 "$HERE/../../bench/gen_dump.py" 300000 >"$WORK/big.json"
"$T" load "sqlite3://$WORK/i.db" "$WORK/big.json" 2>"$WORK/int.err" &
loader=$!
sleep 1.5
kill -INT "$loader"
if wait "$loader"; then fail "the interrupted load succeeded (too fast? $(cat "$WORK/int.err"))"; fi
grep -q interrupted "$WORK/int.err" || fail "unclear message: $(cat "$WORK/int.err")"
[ "$(rows "$WORK/i.db")" = 0 ] || fail "the interrupted load left $(rows "$WORK/i.db") records"
log "dump --subdir loads as a volume of its own"
"$T" dump "sqlite3://$WORK/a.db" "$WORK/sub.json" --subdir /links >/dev/null 2>&1 || fail "dump --subdir"
"$T" load "sqlite3://$WORK/s.db" "$WORK/sub.json" >/dev/null 2>&1 || fail "load of a subdir dump"
mount_vol "sqlite3://$WORK/s.db"
[ "$(ls "$MNT")" = "$(printf 'dangling\nh1\nh2\nrel')" ] || fail "subdir volume: $(ls "$MNT")"
cmp "$SRC/links/h1" "$MNT/h1" || fail "subdir volume: h1"
umount_vol
log "fsck --repair: an entry removed by hand leaves an orphan; repair moves it to /lost+found"
url="sqlite3://$WORK/b.db"
mount_vol "$url"
ino=$(stat -c %i "$MNT/links/h1")
links=$(printf '%016X' "$(stat -c %i "$MNT/links")")
d0=$(printf '%016X' "$(stat -c %i "$MNT/small/d0")")
expect_fail "repair while mounted" "unmounted everywhere" "$T" fsck "$url" --repair
umount_vol
# Every name of small/d0/f1 (3 links) goes; its inode and data stay.
sqlite3 "$WORK/b.db" "DELETE FROM kv WHERE hex(k) IN ('41$links' || '44' || hex('h1'), '41$links' || '44' || hex('h2'), '41$d0' || '44' || hex('f1'))"
"$T" fsck "$url" >/dev/null 2>&1 && fail "fsck does not see the damage"
"$T" fsck "$url" --repair >"$WORK/repair.out" 2>&1 || fail "fsck --repair: $(cat "$WORK/repair.out")"
grep -q "moved inode $ino .* to /lost+found/#$ino" "$WORK/repair.out" || fail "repair output: $(cat "$WORK/repair.out")"
grep -q "link count 3 -> 1" "$WORK/repair.out" || fail "repair output (link count): $(cat "$WORK/repair.out")"
"$T" fsck "$url" >/dev/null 2>&1 || fail "fsck after --repair"
mount_vol "$url"
cmp "$SRC/small/d0/f1" "$MNT/lost+found/#$ino" || fail "the repaired orphan's data"
[ "$(stat -c %h "$MNT/lost+found/#$ino")" = 1 ] || fail "link count after repair: $(stat -c %h "$MNT/lost+found/#$ino")"
umount_vol
log "  $(grep -c repaired: "$WORK/repair.out") change(s), data kept"

log "automatic backups: two mounts, --backup-meta 2s --backup-keep 3, one backup per interval"
mount2=$WORK/mnt2
mkdir -p "$mount2"
began=$(date +%s%N)
"$T" mount "sqlite3://$WORK/a.db" "$MNT" -d --log "$WORK/mount.log" --backup-meta 2s --backup-keep 3 >/dev/null
"$T" mount "sqlite3://$WORK/a.db" "$mount2" -d --log "$WORK/mount2.log" --backup-meta 2s --backup-keep 3 >/dev/null
echo "after the backup started" >"$MNT/late-file"
sleep 13
"$T" umount "$mount2"
umount_vol
made=$(cat "$WORK/mount.log" "$WORK/mount2.log" | grep -c "metadata backup: .* inodes" || true)
# Claims are more than 2 s apart (whole seconds, checked each second; which
# client wins each is meta_test's ClaimJobGoesToOneClientPerInterval): at
# most one per 2 s of the time the mounts were up (longer than the 13 s slept
# when mounting and unmounting are slow), plus one.
elapsed_ms=$((($(date +%s%N) - began) / 1000000))
most=$((elapsed_ms / 2000 + 1))
[ "$made" -ge 3 ] && [ "$made" -le "$most" ] ||
  fail "$made backups in $elapsed_ms ms at one per 2 s by either of two clients (want 3-$most)"
left=$(ls "$WORK/bucket/meta" | grep -c '^dump-.*\.json\.gz$' || true)
[ "$left" = 3 ] || fail "$left backups kept, want 3: $(ls "$WORK/bucket/meta")"
log "  $made backups written, 3 kept; load the newest from the bucket"
"$T" load "sqlite3://$WORK/r.db" --from-bucket "$WORK/bucket" >"$WORK/load.out" 2>&1 || fail "load --from-bucket: $(cat "$WORK/load.out")"
grep -q "loading the backup meta/dump-" "$WORK/load.out" || fail "load --from-bucket: $(cat "$WORK/load.out")"
mount_vol "sqlite3://$WORK/r.db"
[ "$(cat "$MNT/late-file")" = "after the backup started" ] || fail "the restored backup misses a file"
diff -r --no-dereference -x fifo -x late-file -x .trash "$SRC" "$MNT" || fail "diff -r of the volume restored from a backup"
umount_vol
oldest=$(ls "$WORK/bucket/meta" | head -1)
"$T" load "sqlite3://$WORK/r2.db" "meta/$oldest" --from-bucket "$WORK/bucket" >/dev/null 2>&1 || fail "load of a named backup"
expect_fail "load of a missing backup" "meta/dump-nothing" "$T" load "sqlite3://$WORK/r3.db" meta/dump-nothing --from-bucket "$WORK/bucket"
log "passed"
