#!/usr/bin/env bash
# The Debian package end to end, as an operator uses it (run as root under
# tests/tools/with-redis.sh; it installs the package on this machine and
# purges it at the end):
#   scripts/package.sh builds the .deb from BUILD_DIR; dpkg -i installs it;
#   the installed tessera reports the package's version; `man tessera-mount`
#   shows every option `tessera mount --help` shows; bash and zsh complete;
#   the systemd unit verifies; `mount -t tessera -o ...` mounts with the
#   options taking effect (seen in the client's log) and a file round-trips;
#   a plain `umount` waits for the client like `tessera umount`; an fstab
#   line written by `tessera mount --update-fstab` mounts with `mount DIR`;
#   a Redis volume whose password is only in an env-file mounts from fstab
#   and the password shows nowhere; dpkg --purge leaves nothing behind but
#   the volumes' data.
# usage: package_suite.sh BUILD_DIR
set -euo pipefail
BUILD=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REDIS=${TESSERA_TEST_REDIS_URL:?run under tests/tools/with-redis.sh}
[ "$(id -u)" = 0 ] || { echo "package suite: needs root (dpkg, mount)" >&2; exit 1; }
T=/usr/bin/tessera
WORK=$(mktemp -d /tmp/tessera-pkg.XXXXXX)
log() { printf '[package] %s\n' "$*"; }
fail() {
  echo "[package] FAILED: $*" >&2
  for l in "$WORK"/*.log; do [ -f "$l" ] && { echo "--- $l" >&2; tail -15 "$l" >&2; }; done
  exit 1
}
if dpkg -s tessera >/dev/null 2>&1; then
  echo "[package] a tessera package is installed already; remove it first (dpkg --purge tessera)" >&2
  exit 1
fi
cp /etc/fstab "$WORK/fstab.orig" 2>/dev/null || : >"$WORK/fstab.orig"
cleanup() {
  for m in "$WORK"/mnt*; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
  cp "$WORK/fstab.orig" /etc/fstab
  rm -f /etc/tessera/pkgtest.conf
  redis-cli -u "$REDIS" -a secret-pw-4711 --no-auth-warning CONFIG SET requirepass "" >/dev/null 2>&1 || true
  dpkg --purge tessera >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt1" "$WORK/mnt2" "$WORK/mnt3" "$WORK/mnt4"

log "build the package (scripts/package.sh)"
deb=$(bash "$ROOT/scripts/package.sh" "$BUILD" "$WORK/dist" | tail -1)
[ -f "$deb" ] || fail "no package built: $deb"
version=$(dpkg-deb -f "$deb" Version)
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libfuse3 libsqlite3 libhiredis libpq5 libcurl4 libmount1 fuse3; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done

log "install it: dpkg -i $(basename "$deb")"
dpkg -i "$deb" >"$WORK/dpkg.log" 2>&1 || fail "dpkg -i: $(cat "$WORK/dpkg.log")"
[ -x "$T" ] && [ -L /sbin/mount.tessera ] && [ -L /sbin/umount.tessera ] || fail "binary or mount helpers missing"
got=$("$T" --version)
[[ $got == "tessera version $version (commit "* ]] || fail "tessera --version says '$got', package version $version"

log "man pages show every option of --help"
MANWIDTH=200 LC_ALL=C man tessera-mount >"$WORK/man-mount.txt" 2>"$WORK/man.err" || fail "man tessera-mount: $(cat "$WORK/man.err")"
opts=$("$T" mount --help | grep -oE -- '(^|[ ,])--?[a-z][a-z-]*' | grep -oE -- '--?[a-z][a-z-]*' | sort -u)
[ "$(wc -l <<<"$opts")" -ge 30 ] || fail "found only $(wc -l <<<"$opts") options in tessera mount --help"
for o in $opts; do
  grep -qE -- "(^|[ ,])$o([ ,]|$)" "$WORK/man-mount.txt" || fail "man tessera-mount lacks $o"
done
for cmd in $("$T" --help | awk '/^Subcommands:/{on=1; next} on && NF {print $1}'); do
  MANWIDTH=200 LC_ALL=C man "tessera-$cmd" >"$WORK/man-cmd.txt" 2>&1 || fail "man tessera-$cmd: $(cat "$WORK/man-cmd.txt")"
  for o in $("$T" "$cmd" --help | grep -oE -- '(^|[ ,])--[a-z][a-z-]*' | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    grep -q -- "$o" "$WORK/man-cmd.txt" || fail "man tessera-$cmd lacks $o"
  done
  grep -q "tessera-$cmd" <(MANWIDTH=200 LC_ALL=C man tessera) || fail "man tessera does not list $cmd"
done
MANWIDTH=200 LC_ALL=C man mount.tessera | grep -q "MOUNTING WITH mount(8)" || fail "man mount.tessera"

log "shell completion (bash, zsh)"
bash -c 'source /usr/share/bash-completion/completions/tessera && complete -p tessera' | grep -q -- "-F _tessera tessera" ||
  fail "bash: complete -p tessera"
got=$(bash -c 'source /usr/share/bash-completion/completions/tessera
  COMP_WORDS=(tessera mo); COMP_CWORD=1; _tessera; echo "${COMPREPLY[*]}"
  COMP_WORDS=(tessera mount --cache-si); COMP_CWORD=2; _tessera; echo "${COMPREPLY[*]}"')
[ "$got" = "mount
--cache-size" ] || fail "bash completion gave: $got"
got=$(zsh -fc 'autoload -Uz compinit && compinit -u -d '"$WORK"'/zcompdump && print -r -- ${_comps[tessera]}')
[ "$got" = _tessera ] || fail "zsh does not complete tessera (got '$got')"

log "systemd unit"
out=$(systemd-analyze verify /usr/lib/systemd/system/tessera@.service 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"

log "mount -t tessera with -o options; plain umount waits for the client"
"$T" format "sqlite3://$WORK/v1.db" pkgvol --bucket "$WORK/bucket1" >/dev/null 2>&1 || fail "format"
mount -t tessera -o _netdev,mem-cache-size=77,attr-cache=2.5,writeback_cache,noatime,log="$WORK/m1.log" \
  "sqlite3://$WORK/v1.db" "$WORK/mnt1" 2>"$WORK/mount1.err" || fail "mount -t tessera: $(cat "$WORK/mount1.err")"
mountpoint -q "$WORK/mnt1" || fail "not mounted"
grep " $WORK/mnt1 fuse.tessera " /proc/mounts | grep -q noatime || fail "noatime not given to the kernel: $(grep mnt1 /proc/mounts)"
grep -q "attributes 2.5s, .*memory block cache 77 MiB" "$WORK/m1.log" || fail "-o options not in effect: $(grep caches "$WORK/m1.log")"
grep -q "writeback_cache on" "$WORK/m1.log" || fail "-o writeback_cache not in effect"
grep -q "TARGET=$WORK/mnt1 .*helper=tessera" /run/mount/utab || fail "no utab entry with helper=tessera"
got=$(bash -c 'source /usr/share/bash-completion/completions/tessera
  COMP_WORDS=(tessera umount "$1/mn"); COMP_CWORD=2; _tessera; echo "${COMPREPLY[*]}"' _ "$WORK")
[ "$got" = "$WORK/mnt1" ] || fail "bash completion of tessera umount gave '$got', want the mount point $WORK/mnt1"
head -c 5000000 /dev/urandom >"$WORK/data"
cp "$WORK/data" "$WORK/mnt1/data"
# mount(8) ran /sbin/mount.tessera, which forked the client.
pid=$(pgrep -f -- "sqlite3://$WORK/v1.db $WORK/mnt1" | head -1 || true)
[ -n "$pid" ] || fail "no client process"
umount "$WORK/mnt1" || fail "umount"
! mountpoint -q "$WORK/mnt1" || fail "still mounted after umount"
! kill -0 "$pid" 2>/dev/null || fail "umount returned while the client (pid $pid) still runs"
! grep -q "TARGET=$WORK/mnt1 " /run/mount/utab 2>/dev/null || fail "utab entry left after umount"

log "tessera mount --update-fstab, then mount DIR from /etc/fstab"
"$T" mount "sqlite3://$WORK/v1.db" "$WORK/mnt2" -d --mem-cache-size 55 --log "$WORK/m2.log" --update-fstab \
  >"$WORK/fstab.out" 2>&1 || fail "--update-fstab: $(cat "$WORK/fstab.out")"
line=$(grep " $WORK/mnt2 " /etc/fstab) || fail "no fstab line for mnt2"
[ "$line" = "sqlite3://$WORK/v1.db $WORK/mnt2 tessera _netdev,log=$WORK/m2.log,mem-cache-size=55 0 0" ] ||
  fail "fstab line: $line"
umount "$WORK/mnt2"
"$T" mount "sqlite3://$WORK/v1.db" "$WORK/mnt2" -d --mem-cache-size 66 --log "$WORK/m2.log" --update-fstab \
  >/dev/null 2>&1 || fail "--update-fstab again"
[ "$(grep -c " $WORK/mnt2 " /etc/fstab)" = 1 ] || fail "--update-fstab added a second line for mnt2"
umount "$WORK/mnt2"
: >"$WORK/m2.log"
mount "$WORK/mnt2" 2>"$WORK/mount2.err" || fail "mount from fstab: $(cat "$WORK/mount2.err")"
grep -q "memory block cache 66 MiB" "$WORK/m2.log" || fail "fstab options not in effect: $(grep caches "$WORK/m2.log")"
cmp "$WORK/data" "$WORK/mnt2/data" || fail "data differs after remounting from fstab"
umount "$WORK/mnt2"

log "a Redis volume whose password is only in an env-file, mounted from fstab"
meta=${REDIS%/*}/1
"$T" format "$meta" pkgredis --bucket "$WORK/bucket3" >/dev/null 2>&1 || fail "format on Redis"
redis-cli -u "$REDIS" CONFIG SET requirepass secret-pw-4711 >/dev/null
printf '# secrets of the volume\nexport META_PASSWORD="secret-pw-4711"\n' >"$WORK/vol3.env"
chmod 600 "$WORK/vol3.env"
echo "$meta $WORK/mnt3 tessera _netdev,nofail,env-file=$WORK/vol3.env,log=$WORK/m3.log 0 0" >>/etc/fstab
mount "$WORK/mnt3" 2>"$WORK/mount3.err" || fail "mount with env-file: $(cat "$WORK/mount3.err")"
echo hello >"$WORK/mnt3/greeting"
[ "$(cat "$WORK/mnt3/greeting")" = hello ] || fail "round trip on the Redis volume"
for f in /proc/mounts /run/mount/utab /etc/fstab "$WORK/m3.log" "$WORK/mount3.err"; do
  ! grep -q secret-pw-4711 "$f" || fail "the password shows in $f"
done
pid=$(pgrep -f -- "$meta $WORK/mnt3" | head -1 || true)
[ -n "$pid" ] || fail "no client process for mnt3"
! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q secret-pw-4711 || fail "the password shows in the client's command line"
umount "$WORK/mnt3" || fail "umount of the Redis volume"
echo "META_PASSWORD=wrong" >"$WORK/bad.env"
out=$(mount -t tessera -o "env-file=$WORK/bad.env" "$meta" "$WORK/mnt3" 2>&1) && fail "mounted with a wrong password"
grep -qi "password\|auth" <<<"$out" || fail "unclear error for a wrong password: $out"
out=$(mount -t tessera -o "env-file=$WORK/missing.env" "$meta" "$WORK/mnt3" 2>&1) && fail "mounted with a missing env-file"
grep -q "missing.env" <<<"$out" || fail "unclear error for a missing env-file: $out"
out=$(mount -t tessera -o "no-such-option=1" "sqlite3://$WORK/v1.db" "$WORK/mnt3" 2>&1) && fail "mounted with an unknown option"
grep -q "no-such-option" <<<"$out" || fail "unclear error for an unknown option: $out"

log "tessera@.service's commands, run as systemd runs them (systemd is not PID 1 here)"
unit=/usr/lib/systemd/system/tessera@.service
mkdir -p /etc/tessera
[ -e /etc/tessera/pkgtest.conf ] && fail "/etc/tessera/pkgtest.conf exists already"
conf=/etc/tessera/pkgtest.conf
printf 'META_URL=sqlite3://%s\nMOUNTPOINT=%s\nMOUNT_OPTIONS=--mem-cache-size 44 --writeback\n' \
  "$WORK/v1.db" "$WORK/mnt4" >"$conf"
# unit_cmd KEY [N]: the Nth KEY= line of the unit, run with the conf's
# variables ($X split into words, ${X} one word, as systemd does).
unit_cmd() {
  local cmd
  cmd=$(sed -n "s/^$1=-\{0,1\}//p" "$unit" | sed -n "${2:-1}p")
  [ -n "$cmd" ] || fail "no $1 line ${2:-1} in the unit"
  (
    # EnvironmentFile= syntax: NAME=VALUE lines, the value taken whole.
    while IFS='=' read -r k v; do [[ $k =~ ^[A-Z_]+$ ]] && export "$k=$v"; done <"$conf"
    eval "$cmd"
  )
}
start_service() {
  unit_cmd ExecStartPre 1 >/dev/null 2>&1 || true  # '-': a failure is ignored
  unit_cmd ExecStartPre 2 || fail "ExecStartPre 2"
  unit_cmd ExecStart >>"$WORK/m4.log" 2>&1 &
  svc=$!
  for _ in $(seq 100); do mountpoint -q "$WORK/mnt4" && return 0; sleep 0.1; done
  fail "ExecStart did not mount"
}
start_service
grep -q "memory block cache 44 MiB.*writeback on" "$WORK/m4.log" || fail "MOUNT_OPTIONS not in effect: $(grep caches "$WORK/m4.log")"
cp "$WORK/data" "$WORK/mnt4/data4"
kill -9 "$svc"; wait "$svc" 2>/dev/null || true
pkill -9 -f -- "sqlite3://$WORK/v1.db $WORK/mnt4" || true
sleep 0.3
start_service  # Restart=on-failure: the dead mount is detached first
cmp "$WORK/data" "$WORK/mnt4/data4" || fail "data written before the crash differs after the restart"
unit_cmd ExecStop || fail "ExecStop"
wait "$svc" || fail "the client exited with $? after ExecStop"
! mountpoint -q "$WORK/mnt4" || fail "still mounted after ExecStop"
rm -f "$conf"
rmdir /etc/tessera 2>/dev/null || true

log "dpkg --purge leaves only the volumes' data"
files=$(dpkg -L tessera | while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done)
dpkg --purge tessera >"$WORK/purge.log" 2>&1 || fail "dpkg --purge: $(cat "$WORK/purge.log")"
for f in $files; do [ ! -e "$f" ] && [ ! -L "$f" ] || fail "$f left after purge"; done
! dpkg -s tessera >/dev/null 2>&1 || fail "package still known to dpkg"
[ -f "$WORK/v1.db" ] && [ -n "$(find "$WORK/bucket1" -type f | head -1)" ] || fail "the volume's data went with the package"
log "package suite passed ($(basename "$deb"), $(wc -w <<<"$files") files)"
