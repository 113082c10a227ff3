#!/usr/bin/env bash
# Bad input to the CLI: each case must exit non-zero with ONE clear line on
# stderr and leave what is stored untouched. Usage: cli_test.sh TESSERA_BINARY
set -uo pipefail
T=$(realpath "$1")
W=$(mktemp -d /tmp/tessera-cli.XXXXXX)
MNT=$W/mnt
mkdir -p "$MNT"
trap 'mountpoint -q "$MNT" && umount -l "$MNT"; rm -rf "$W"' EXIT
passed=0
failed=0

# expect_fail NAME PATTERN CMD...: non-zero exit, stderr is one line matching PATTERN.
expect_fail() {
  local name=$1 pattern=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(grep -c '^tessera: ' <<<"$err")
  if [ $rc -ne 0 ] && grep -qiE "$pattern" <<<"$err" && [ "$lines" -le 2 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: rc=$rc stderr=<$err>"
  fi
}
expect_ok() {
  local name=$1
  shift
  if "$@" >/dev/null 2>"$W/err"; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL $name: $(cat "$W/err")"
  fi
}

expect_fail "malformed url" "url|meta" "$T" format "not-a-url" vol1 --bucket "$W/b"
expect_fail "unknown scheme" "scheme|url|unsupported" "$T" format "foo://bar" vol1 --bucket "$W/b"
expect_fail "empty sqlite path" "url|path" "$T" format "sqlite3://" vol1 --bucket "$W/b"
expect_fail "bad volume name" "volume name" "$T" format "sqlite3://$W/m.db" "A_b" --bucket "$W/b"
expect_fail "bad block size" "block-size" "$T" format "sqlite3://$W/m.db" vol1 --block-size 1 --bucket "$W/b"
expect_fail "negative capacity" "range" "$T" format "sqlite3://$W/m.db" vol1 --capacity -1 --bucket "$W/b"
expect_fail "unknown option" "unknown|extra|not expected|--frobnicate" "$T" format "sqlite3://$W/m.db" vol1 --frobnicate
expect_fail "missing argument" "required|META-URL|NAME" "$T" format
expect_fail "unknown command" "frob|subcommand|not expected|extra" "$T" frob
expect_fail "status of missing volume" "no volume|format" "$T" status "sqlite3://$W/none.db"
expect_fail "mount missing volume" "no volume|format" "$T" mount "sqlite3://$W/none.db" "$MNT"

expect_ok "format" "$T" format "sqlite3://$W/m.db" vol1 --bucket "$W/b"
before=$(sqlite3 "$W/m.db" "select hex(v) from kv where k = 'setting'")
expect_fail "format over existing" "already formatted|--force" "$T" format "sqlite3://$W/m.db" vol2 --bucket "$W/b2"
after=$(sqlite3 "$W/m.db" "select hex(v) from kv where k = 'setting'")
if [ "$before" = "$after" ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL settings changed by refused format"; fi

expect_fail "mount point missing" "does not exist" "$T" mount "sqlite3://$W/m.db" "$W/nope"
touch "$W/file"
expect_fail "mount point is a file" "not a directory" "$T" mount "sqlite3://$W/m.db" "$W/file"
expect_fail "negative cache" "negative" "$T" mount "sqlite3://$W/m.db" "$MNT" --attr-cache -1
expect_fail "bad backup interval" "not a duration" "$T" mount "sqlite3://$W/m.db" "$MNT" --backup-meta 5x
expect_fail "backup keep 0" "backup-keep|range" "$T" mount "sqlite3://$W/m.db" "$MNT" --backup-keep 0
expect_fail "dump of a missing volume" "no volume" "$T" dump "sqlite3://$W/none.db" "$W/none.json"
expect_fail "dump into a missing directory" "No such file" "$T" dump "sqlite3://$W/m.db" "$W/no/such/dir/d.json"
expect_fail "load into a formatted engine" "not empty" "$T" load "sqlite3://$W/m.db" /dev/null
expect_fail "load from a bucket without backups" "no metadata backup" "$T" load "sqlite3://$W/new.db" --from-bucket "$W/b"
expect_fail "repair of a missing volume" "no volume" "$T" fsck "sqlite3://$W/none.db" --repair
# A bucket that cannot be listed (its directory replaced by a file): gc says
# so and changes nothing.
expect_ok "format for the gc case" "$T" format "sqlite3://$W/m6.db" vol6 --bucket "$W/b6"
rm -rf "$W/b6" && echo "not a bucket" >"$W/b6"
expect_fail "gc on a bucket it cannot list" "listing|not a directory|bucket" "$T" gc "sqlite3://$W/m6.db" --delete
if [ "$(cat "$W/b6")" = "not a bucket" ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL gc changed the file"; fi
for bad in nan inf -inf 1e300; do
  expect_fail "cache timeout $bad" "finite|number" "$T" mount "sqlite3://$W/m.db" "$MNT" --entry-cache "$bad"
done
expect_fail "unknown scheme names every engine" "redis://.*postgres://" "$T" status "mysql://h/db"
mkdir -p "$W/full" && touch "$W/full/x"
expect_fail "non-empty mount point" "not empty.*--nonempty" "$T" mount "sqlite3://$W/m.db" "$W/full"
expect_fail "high-level libfuse option" "kernel_cache.*high-level" "$T" mount "sqlite3://$W/m.db" "$MNT" -o kernel_cache
expect_fail "entry_timeout names its flag" "instead: --entry-cache" "$T" mount "sqlite3://$W/m.db" "$MNT" -o entry_timeout=5
expect_fail "not a FUSE option" "frobnicate.*not a FUSE mount option" "$T" mount "sqlite3://$W/m.db" "$MNT" -o frobnicate
expect_fail "writeback without cache dir" "cache-dir none" "$T" mount "sqlite3://$W/m.db" "$MNT" --writeback --cache-dir none
mkdir -p "$W/b3" && "$T" format "sqlite3://$W/m3.db" vol3 --bucket "$W/b3" >/dev/null 2>&1
rm -rf "$W/b3" && echo x >"$W/b3"
expect_fail "mount with an unusable bucket" "object storage .* not usable" "$T" mount "sqlite3://$W/m3.db" "$MNT" -d --log "$W/log3"
expect_fail "format on a bucket path that is a file" "not a directory" "$T" format "sqlite3://$W/m4.db" vol4 --bucket "$W/b3"
expect_fail "upload delay without writeback" "needs --writeback" "$T" mount "sqlite3://$W/m.db" "$MNT" --upload-delay 5
expect_fail "negative commit delay" "commit-delay" "$T" mount "sqlite3://$W/m.db" "$MNT" --commit-delay -1
expect_ok "mount" "$T" mount "sqlite3://$W/m.db" "$MNT" -d --log "$W/log"
echo data >"$MNT/f"
expect_fail "mount twice" "already a mount point" "$T" mount "sqlite3://$W/m.db" "$MNT" -d --log "$W/log"
expect_ok "status lists session" bash -c "'$T' status 'sqlite3://$W/m.db' | grep -q '\"MountPoint\": \"$MNT\"'"
expect_ok "info" bash -c "'$T' info '$MNT/f' | grep -q 'chunk 0: 1 slice'"
expect_fail "info outside a mount" "not inside" "$T" info "$W/file"
expect_ok "status shows the heartbeat as a time" bash -c "'$T' status 'sqlite3://$W/m.db' | grep -qE '\"Heartbeat\": \"20[0-9-]+T[0-9:]+Z\"'"
expect_ok "status marks live sessions fresh" bash -c "'$T' status 'sqlite3://$W/m.db' | grep -q '\"Stale\": false'"
# quota and clone: bad input
expect_fail "quota: unknown action" "ACTION|set, get|not in" "$T" quota frob "sqlite3://$W/m.db"
expect_fail "quota set without a target" "needs .*path" "$T" quota set "sqlite3://$W/m.db" --inodes 5
expect_fail "quota set without a limit" "capacity" "$T" quota set "sqlite3://$W/m.db" --uid 5
expect_fail "quota with two targets" "one of" "$T" quota get "sqlite3://$W/m.db" --uid 5 --gid 5
expect_fail "quota on a missing path" "no such file" "$T" quota set "sqlite3://$W/m.db" --path /nope --inodes 5
expect_fail "quota on a file" "not a directory" "$T" quota set "sqlite3://$W/m.db" --path /f --inodes 5
expect_fail "quota get of none" "no quota" "$T" quota get "sqlite3://$W/m.db" --uid 4242
expect_fail "quota on a missing volume" "no volume|format" "$T" quota list "sqlite3://$W/none.db"
expect_fail "clone of a missing source" "no such file" "$T" clone "$MNT/nope" "$MNT/x"
expect_fail "clone onto an existing name" "already exists" "$T" clone "$MNT/f" "$MNT/f"
expect_fail "clone out of the mount" "not inside a Tessera mount|same mount" "$T" clone "$MNT/f" "$W/x"
expect_ok "clone" "$T" clone "$MNT/f" "$MNT/f-clone"
expect_ok "the clone reads the same" cmp "$MNT/f" "$MNT/f-clone"
# observability: bad input
expect_fail "stats outside a mount" "not in a Tessera mount" "$T" stats "$W" --count 1
expect_fail "stats of a missing path" "no such file" "$T" stats "$W/nope" --count 1
expect_fail "stats with a bad schema" "unknown letter" "$T" stats "$MNT" --schema fz --count 1
expect_fail "stats with a bad interval" "interval" "$T" stats "$MNT" --interval 0 --count 1
expect_fail "stats with the wrong prefix" "cannot read .*internal-prefix" "$T" stats "$MNT" --internal-prefix .x- --count 1
expect_fail "profile outside a mount" "not in a Tessera mount" "$T" profile "$W" --duration 1
expect_fail "debug outside a mount" "not in a Tessera mount" "$T" debug "$W"
mkdir -p "$W/empty"
expect_fail "mount with bad metrics labels" "not a label name" "$T" mount "sqlite3://$W/m.db" "$W/empty" --metrics-labels "a b=1"
expect_fail "mount with a bad internal prefix" "without '/'" "$T" mount "sqlite3://$W/m.db" "$W/empty" --internal-prefix "a/b"
expect_ok "status shows the local session's writeback" bash -c "'$T' status 'sqlite3://$W/m.db' | grep -q '\"Writeback\": \"off\"'"
expect_ok "status is valid JSON" bash -c "'$T' status 'sqlite3://$W/m.db' | python3 -m json.tool >/dev/null"
# A busy mount names who keeps it busy; a client started from inside a mount
# (its current directory there) must not keep that mount busy.
mkdir -p "$W/mnt2" "$W/inner"
(cd "$MNT" && "$T" format "sqlite3://$W/m5.db" vol5 --bucket "$W/b5" >/dev/null 2>&1 && "$T" mount "sqlite3://$W/m5.db" "$W/mnt2" -d --log "$W/log5" >/dev/null 2>&1)
(cd "$MNT" && exec sleep 30) &
sleeper=$!
sleep 0.3
expect_fail "busy umount names the process" "busy: used by pid $sleeper \\(sleep: current directory\\)" "$T" umount "$MNT"
kill $sleeper; wait $sleeper 2>/dev/null
expect_ok "a client started inside a mount does not keep it busy" "$T" umount "$MNT"
"$T" umount "$W/mnt2" >/dev/null 2>&1
expect_ok "mount again" "$T" mount "sqlite3://$W/m.db" "$MNT" -d --log "$W/log"
# A client killed without unmounting leaves a dead mount: named, with the fix.
pkill -9 -f "tessera mount sqlite3://$W/m.db $MNT" ; sleep 0.3
expect_ok "status marks the killed client's session stale" bash -c "'$T' status 'sqlite3://$W/m.db' | grep -q '\"Stale\": true'"
expect_fail "dead mount" "dead mount.*tessera umount" "$T" mount "sqlite3://$W/m.db" "$MNT" -d --log "$W/log"
expect_ok "umount a dead mount" "$T" umount "$MNT"
expect_ok "mount after the dead one" "$T" mount "sqlite3://$W/m.db" "$MNT" -d --log "$W/log"
expect_ok "the next mount cleans the dead session" bash -c "! '$T' status 'sqlite3://$W/m.db' | grep -q '\"Stale\": true'"
expect_ok "umount" "$T" umount "$MNT"
expect_fail "umount not mounted" "not mounted" "$T" umount "$MNT"
expect_fail "umount --flush not a mount" "not a Tessera mount|nothing to flush" "$T" umount --flush "$MNT"
expect_ok "fsck" "$T" fsck "sqlite3://$W/m.db"
expect_ok "version" bash -c "'$T' version | grep -q 'tessera version'"
expect_ok "--version names the commit and build type" bash -c "'$T' --version | grep -qE '^tessera version [0-9.]+ \\(commit [0-9a-f]{12}(-dirty)?, [A-Za-z]+ build\\)$'"
expect_fail "completion for an unknown shell" "bash.*zsh" "$T" completion fish
expect_fail "man pages into a directory that cannot be made" "cannot create /proc/tessera-man" "$T" gen-man /proc/tessera-man

# mount(8)'s helper (the same program, called mount.tessera) and --update-fstab.
ln -s "$T" "$W/mount.tessera"
expect_fail "mount helper without arguments" "usage: mount.tessera" "$W/mount.tessera"
expect_fail "mount helper: option without its value" "cache-size needs a value" "$W/mount.tessera" "sqlite3://$W/m.db" "$MNT" -o cache-size
expect_fail "mount helper: a switch with a bad value" "writeback is a switch" "$W/mount.tessera" "sqlite3://$W/m.db" "$MNT" -o writeback=maybe
expect_fail "mount helper: unknown option" "no-such-opt" "$W/mount.tessera" "sqlite3://$W/m.db" "$MNT" -o no-such-opt=1
printf 'META_PASSWORD=x\nthis is not an assignment\n' >"$W/bad.env"
expect_fail "mount helper: bad env-file" "bad.env, line 2: expected NAME=VALUE" "$W/mount.tessera" "sqlite3://$W/m.db" "$MNT" -o env-file="$W/bad.env"
expect_fail "mount helper: missing env-file" "nothere.env" "$W/mount.tessera" "sqlite3://$W/m.db" "$MNT" -o env-file="$W/nothere.env"
expect_ok "mount helper -f mounts nothing" bash -c "'$W/mount.tessera' 'sqlite3://$W/m.db' '$MNT' -f -o cache-size=10,_netdev 2>&1 | grep -q -- '--cache-size=10' && ! mountpoint -q '$MNT'"
# Every option of `tessera mount --help` has its -o form (a value "1" is
# enough to see the translation; -f mounts nothing).
for opt in $("$T" mount --help | grep -oE -- '^ +(-[a-z],)?--[a-z][a-z-]*' | grep -oE -- '--[a-z-]+$'); do
  name=${opt#--}
  case $name in help | background | update-fstab) continue ;; esac
  out=$("$W/mount.tessera" "sqlite3://$W/m.db" "$MNT" -f -o "$name=1" 2>&1)
  if grep -qE -- " $opt(=1)?( |$)" <<<"$out"; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL mount helper: -o $name=1 gave <$out>"
  fi
done
fstab_sum=$(cksum </etc/fstab)
expect_fail "--update-fstab refuses a password" "no password" "$T" mount "redis://:secret@127.0.0.1:1/1" "$MNT" --update-fstab
expect_ok "--update-fstab left /etc/fstab alone" test "$(cksum </etc/fstab)" = "$fstab_sum"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
