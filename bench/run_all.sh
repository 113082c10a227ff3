#!/usr/bin/env bash
# bench/run_all.sh — benchmark Tessera against a local directory and libfuse's
# passthrough_ll and passthrough_hp examples, with fio (bench/fio/*.fio) and an mdtest-shaped metadata
# workload (bench/mdbench.c), and write a markdown report.
#
# See usage() below, or run: bench/run_all.sh --help
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH")

usage() {
    cat <<EOF
usage: bench/run_all.sh [--quick] [--out FILE.md] [options]

Sets up three targets over directories of one local file system, runs the fio
jobs and the metadata workload on each, and writes a markdown report:
  local        the directory itself
  passthrough  libfuse's passthrough_ll example (compiled now from
               /usr/share/doc/libfuse3-dev/examples), default caching
               (cache=auto: 1 s entry/attr timeouts, no writeback cache);
               O_DIRECT is dropped from its own opens (see --pristine-passthrough)
  passthrough-hp  libfuse's passthrough_hp example (libfuse 3.14's C++ example:
               Debian ships it only in the fuse3 source package, which is fetched
               with 'apt-get source' once and kept under --hp-cache), compiled
               unchanged and mounted with its defaults: 1-day entry/attr
               timeouts, writeback cache, splice, default_permissions.
               Not in the default --targets; issue 14's reference.
  tessera      a Tessera mount of a fresh SQLite + local-directory volume,
               default mount options (coherent 300 s entry/attr caches, no writeback cache)
  tessera-wb   the same with --writeback (blocks staged on a cache dir in the
               scratch directory, uploaded in the background); write jobs only
Everything lives in a scratch directory that is unmounted and removed on exit.

options:
  --quick              ~1 minute smoke run (small files, 1 s fio jobs, small trees)
  --out FILE           report path (default: bench/results-latest.md; with
                       --quick: /tmp/tessera-bench-quick.md)
  --raw DIR            also keep the raw outputs (fio JSON, mdbench text, logs) in DIR
  --workdir DIR        scratch directory (default /var/tmp/tessera-bench); it is
                       wiped at start (stale mounts unmounted) and at exit
  --runtime S          seconds per time-based fio job (default 15; quick 2)
  --size SIZE          data file per read job / per seqwrite job (default 1g; quick 128m)
  --rw-size SIZE       file per randwrite job (default 512m; quick 64m)
  --procs P            processes in the parallel metadata runs (default 4)
  --rounds N           run every fio job and mdbench run N times, the targets in a
                       rotating order each round; the report shows medians and the
                       range of the per-round ratios (default 1)
  --md-bytes N         bytes written/read per file by mdbench (default 4096)
  --md-settle S        untimed pause before mdbench's stat and read phases so the
                       FUSE mounts' 1 s kernel caches expire (default 1.5; quick 0;
                       0 = back to back, as mdtest does)
  --targets LIST       comma-separated subset of local,passthrough,passthrough-hp,
                       tessera,tessera-wb (default: all but passthrough-hp)
  --hp-cache DIR       where the fuse3 source package for passthrough-hp is kept
                       (default \$XDG_CACHE_HOME or ~/.cache, then tessera-bench)
  --only fio|md        run only the fio jobs or only the metadata workload
  --tessera BIN        tessera binary (default: build/src/tessera; copied at start)
  --format-opts "..."  extra 'tessera format' options (e.g. "--block-size 1024")
  --mount-opts "..."   extra 'tessera mount' options (e.g. "--writeback-cache")
  --wb-opts "..."      extra mount options of the tessera-wb target only (e.g. "--upload-delay 30")
  --pristine-passthrough  compile passthrough_ll unchanged (its O_DIRECT writes
                       then fail with EINVAL; by default O_DIRECT is dropped from
                       the daemon's own open of the underlying file)
  -h, --help           this text

Needs: fio, gcc, pkg-config + libfuse3-dev, python3, fusermount3, /dev/fuse; root
(or a user allowed to mount FUSE; Tessera then gets --no-allow-other).
EOF
}

die()  { echo "run_all.sh: error: $*" >&2; exit 1; }
log()  { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# ---------------------------------------------------------------- options ---
QUICK=0 OUT="" RAW="" WORKDIR=/var/tmp/tessera-bench
RUNTIME="" SIZE="" RW_SIZE="" PROCS=4 MD_BYTES=4096 MD_SETTLE="" ONLY="" ROUNDS=1
TARGETS="local,passthrough,tessera,tessera-wb"
HP_CACHE="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/tessera-bench"
TESSERA_SRC="$REPO/build/src/tessera" FORMAT_OPTS="" MOUNT_OPTS="" WB_OPTS="" PRISTINE_PT=0
while (($#)); do
    case $1 in
        --quick) QUICK=1 ;;
        --out) OUT=$2; shift ;;
        --raw) RAW=$2; shift ;;
        --workdir) WORKDIR=$2; shift ;;
        --runtime) RUNTIME=$2; shift ;;
        --size) SIZE=$2; shift ;;
        --rw-size) RW_SIZE=$2; shift ;;
        --procs) PROCS=$2; shift ;;
        --rounds) ROUNDS=$2; shift ;;
        --md-bytes) MD_BYTES=$2; shift ;;
        --md-settle) MD_SETTLE=$2; shift ;;
        --targets) TARGETS=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --hp-cache) HP_CACHE=$2; shift ;;
        --tessera) TESSERA_SRC=$2; shift ;;
        --format-opts) FORMAT_OPTS=$2; shift ;;
        --mount-opts) MOUNT_OPTS=$2; shift ;;
        --wb-opts) WB_OPTS=$2; shift ;;
        --pristine-passthrough) PRISTINE_PT=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done

# Full run: ~1 GiB files, 15 s time-based jobs, mdtest -b 6 -z 4 -I 8 trees.
# Quick run: the same jobs and phases, scaled down to check that all works.
if ((QUICK)); then
    : "${RUNTIME:=1}" "${SIZE:=128m}" "${RW_SIZE:=64m}" "${MD_SETTLE:=0}"
    MD_TREE1="-b 4 -z 2 -I 8"         # 21 nodes, 168 items
    MD_TREEP="-b 4 -z 1 -I 8"         # 5 nodes, 40 items per process
    MD_FLAT_N=500
    : "${OUT:=/tmp/tessera-bench-quick.md}"
else
    : "${RUNTIME:=15}" "${SIZE:=1g}" "${RW_SIZE:=512m}" "${MD_SETTLE:=1.5}"
    MD_TREE1="-b 6 -z 4 -I 8"         # mdtest -b 6 -z 4 -I 8: 1555 nodes, 12440 items
    MD_TREEP="-b 6 -z 3 -I 8"         # 259 nodes, 2072 items per process
    MD_FLAT_N=4000                    # per process (CubeFS ran mdtest -n 5000)
    : "${OUT:=$BENCH/results-latest.md}"
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds takes a whole number of rounds, 1 or more (got '$ROUNDS')"
[[ $WORKDIR == /* && $WORKDIR != / ]] || die "--workdir must be an absolute path other than /"
WORKDIR=${WORKDIR%/}
OUT=$(realpath -m "$OUT")
[[ -z $ONLY || $ONLY == fio || $ONLY == md ]] || die "--only takes fio or md"
IFS=, read -r -a TARGET_LIST <<<"$TARGETS"
for t in "${TARGET_LIST[@]}"; do
    [[ $t == local || $t == passthrough || $t == passthrough-hp || $t == tessera || $t == tessera-wb ]] ||
        die "unknown target: $t"
done

# -------------------------------------------------------------- preflight ---
PT_SRC_C=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
for tool in fio gcc pkg-config python3 fusermount3 findmnt flock; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install fio gcc pkg-config libfuse3-dev fuse3 python3)"
done
[[ -c /dev/fuse ]] || die "/dev/fuse is missing"
[[ -r $PT_SRC_C ]] || die "$PT_SRC_C missing (apt-get install libfuse3-dev)"
pkg-config --exists fuse3 || die "pkg-config cannot find fuse3 (apt-get install libfuse3-dev)"
if [[ ",$TARGETS," == *,tessera* ]]; then
    # Other engineers rebuild the tree; if the binary is missing, wait for it.
    for _ in $(seq 20); do [[ -x $TESSERA_SRC ]] && break; log "waiting for $TESSERA_SRC ..."; sleep 15; done
    [[ -x $TESSERA_SRC ]] || die "$TESSERA_SRC not found (build the project first)"
fi

# ------------------------------------------------------- lock and cleanup ---
# fd 9 holds the lock; long-lived children get "9>&-" so that daemons orphaned by
# a kill -9 of this script do not keep the lock (the next run unmounts them).
LOCKED=0
exec 9>"$WORKDIR.lock"
flock -n 9 || die "another run_all.sh holds $WORKDIR.lock"
LOCKED=1

W=""                    # scratch dir; set once it is ours
declare -A TDIR=()      # target -> directory the benchmarks run in
declare -A TPID=()      # target -> PID of its FUSE daemon
STARTED_PIDS=()         # daemons we started (killed by PID if unmount leaves them)

mounts_under() {        # mount points below $1, deepest first
    findmnt -rn -o TARGET | awk -v r="$1/" 'index($0, r) == 1' | sort -r
}

unmount_under() {
    local root=$1 mp fstype
    while read -r mp; do
        [[ -n $mp ]] || continue
        fstype=$(findmnt -rn -o FSTYPE --mountpoint "$mp" || true)
        log "unmounting $mp ($fstype)"
        if [[ $fstype == fuse.tessera && -x $root/bin/tessera ]]; then
            # waits for the client to flush and exit
            timeout 120 "$root/bin/tessera" umount "$mp" >/dev/null 2>&1 ||
                fusermount3 -u "$mp" 2>/dev/null || fusermount3 -uz "$mp" 2>/dev/null || true
        else
            fusermount3 -u "$mp" 2>/dev/null || fusermount3 -uz "$mp" 2>/dev/null ||
                umount -l "$mp" 2>/dev/null || true
        fi
    done < <(mounts_under "$root")
}

wipe_workdir() {        # unmount everything below $1, then remove it
    local dir=$1
    [[ -e $dir ]] || return 0
    [[ -e $dir/.tessera-bench-workdir ]] ||
        die "$dir exists but was not made by run_all.sh; refusing to remove it"
    unmount_under "$dir"
    if [[ -n $(mounts_under "$dir") ]]; then
        echo "run_all.sh: warning: mounts remain under $dir; not removing it" >&2
        return 1
    fi
    rm -rf --one-file-system "$dir"
}

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if [[ -n $W ]]; then
        log "cleaning up $W"
        wipe_workdir "$W"
        local pid
        for pid in "${STARTED_PIDS[@]}"; do
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && { log "killing daemon $pid"; kill "$pid"; }
        done
    fi
    ((LOCKED)) && rm -f "$WORKDIR.lock"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A previous run that was killed may have left mounts and files behind.
wipe_workdir "$WORKDIR" || die "cannot clean the stale $WORKDIR"
mkdir -p "$WORKDIR"
W=$WORKDIR
touch "$W/.tessera-bench-workdir"
RES=$W/results LOGS=$W/results/logs BIN=$W/bin
mkdir -p "$RES/fio" "$RES/md" "$LOGS" "$BIN"
START_TS=$(date +%s)

# ------------------------------------------------------------------ build ---
# passthrough_hp.cc and its cxxopts.hpp come from the Debian source package of
# the libfuse installed (fuse3), fetched once with a one-off deb-src list, so
# the example matches the headers it is compiled against. Prints the example
# directory.
fetch_hp_source() {
    local ver upstream dir src list codename
    # The source version: a binNMU (3.14.0-4+b1) is built from 3.14.0-4.
    ver=$(dpkg-query -W -f='${source:Version}' libfuse3-dev 2>/dev/null) || { echo "libfuse3-dev is not installed" >&2; return 1; }
    upstream=${ver%-*}
    dir=$HP_CACHE/fuse-$upstream/example
    if [[ -r $dir/passthrough_hp.cc && -r $dir/cxxopts.hpp ]]; then echo "$dir"; return 0; fi
    command -v apt-get >/dev/null || { echo "apt-get not found: put libfuse $upstream's example/ in $dir" >&2; return 1; }
    log "fetching Debian's fuse3 $ver source package into $HP_CACHE (once)"
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [[ -n $codename ]] || { echo "no VERSION_CODENAME in /etc/os-release: put libfuse $upstream's example/ in $dir" >&2; return 1; }
    src=$(mktemp -d) || return 1
    list=$src/sources.list
    mkdir -p "$src/lists/partial" "$src/cache/archives/partial"
    echo "deb-src http://deb.debian.org/debian $codename main" >"$list"
    chmod 755 "$src"
    # apt with only that list, its lists and caches in $src (the system's stay as they are)
    local apt=(apt-get -q -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=-
               -o Dir::State::Lists="$src/lists" -o Dir::Cache="$src/cache")
    if ! (cd "$src" && "${apt[@]}" update >"$src/log" 2>&1 &&
          "${apt[@]}" source --download-only "fuse3=$ver" >>"$src/log" 2>&1); then
        tail -5 "$src/log" >&2
        rm -rf "$src"
        echo "could not download the fuse3 $ver source package" >&2
        return 1
    fi
    # Extracted aside, then moved into place: another run may be fetching too.
    mkdir -p "$HP_CACHE" "$src/x"
    tar -C "$src/x" -xf "$(ls "$src"/fuse3_"$upstream".orig.tar.* | grep -v "\.asc$" | head -1)" "fuse-$upstream/example" ||
        { rm -rf "$src"; return 1; }
    [[ -e $HP_CACHE/fuse-$upstream ]] || mv "$src/x/fuse-$upstream" "$HP_CACHE/" || true
    rm -rf "$src"
    [[ -r $dir/passthrough_hp.cc ]] || { echo "no example/passthrough_hp.cc in fuse3 $ver" >&2; return 1; }
    echo "$dir"
}

log "compiling passthrough_ll and mdbench"
# Unpatched, passthrough_ll fails every O_DIRECT write with EINVAL: it opens the
# underlying file with the caller's flags, O_DIRECT included, and libfuse's
# request buffer is not aligned for O_DIRECT. Like fuse-overlayfs (PR #168), we
# drop O_DIRECT from its own open()/openat(); the kernel still sends the direct
# I/O to the daemon uncached. --pristine-passthrough keeps the example as is.
cp "$PT_SRC_C" "$BIN/passthrough_ll.c"
if ((!PRISTINE_PT)); then
    sed -i -E 's/(fi->flags[^;]*)& ~O_NOFOLLOW/\1\& ~(O_NOFOLLOW | O_DIRECT)/' "$BIN/passthrough_ll.c"
    [[ $(grep -c 'O_NOFOLLOW | O_DIRECT' "$BIN/passthrough_ll.c") == 2 ]] ||
        die "could not patch O_DIRECT out of passthrough_ll.c (example changed?)"
fi
# shellcheck disable=SC2046  # pkg-config output must split into words
gcc -O2 -Wall -I"$(dirname "$PT_SRC_C")" "$BIN/passthrough_ll.c" $(pkg-config fuse3 --cflags --libs) \
    -o "$BIN/passthrough_ll"
gcc -O2 -Wall "$BENCH/mdbench.c" -o "$BIN/mdbench"
if [[ ",$TARGETS," == *,passthrough-hp,* ]]; then
    HP_SRC=$(fetch_hp_source) || die "cannot get passthrough_hp.cc (see above)"
    log "compiling passthrough_hp from $HP_SRC"
    # shellcheck disable=SC2046
    g++ -std=c++17 -O2 -I"$HP_SRC" "$HP_SRC/passthrough_hp.cc" $(pkg-config fuse3 --cflags --libs) -lpthread \
        -o "$BIN/passthrough_hp" 2>"$LOGS/passthrough_hp-build.log" ||
        { cat "$LOGS/passthrough_hp-build.log" >&2; die "passthrough_hp did not compile"; }
fi
if [[ ",$TARGETS," == *,tessera* ]]; then
    cp "$TESSERA_SRC" "$BIN/tessera"     # a rebuild during the run must not change it
fi

# passthrough_ll keeps one O_PATH fd per inode the kernel knows.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)

# ------------------------------------------------------------ the targets ---
wait_mounted() {        # wait_mounted MOUNTPOINT FSTYPE PID
    for _ in $(seq 100); do
        [[ $(findmnt -rn -o FSTYPE --mountpoint "$1" 2>/dev/null) == "$2" ]] && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

setup_local() {
    TDIR[local]=$W/local
    mkdir -p "${TDIR[local]}"
}

setup_passthrough() {
    local src=$W/passthrough-src mnt=$W/passthrough-mnt pid
    mkdir -p "$src" "$mnt"
    # Default options: multi-threaded, cache=auto (timeout 1 s), no writeback.
    "$BIN/passthrough_ll" -f -o source="$src" "$mnt" >"$LOGS/passthrough_ll.log" 2>&1 9>&- &
    pid=$!
    STARTED_PIDS+=("$pid")
    wait_mounted "$mnt" fuse.passthrough_ll "$pid" ||
        { cat "$LOGS/passthrough_ll.log" >&2; die "passthrough_ll did not mount"; }
    TDIR[passthrough]=$mnt TPID[passthrough]=$pid
}

setup_passthrough-hp() {
    local src=$W/passthrough-hp-src mnt=$W/passthrough-hp-mnt pid
    mkdir -p "$src" "$mnt"
    # Its defaults: 1-day timeouts, writeback cache, splice, idle threads unbounded.
    "$BIN/passthrough_hp" --foreground "$src" "$mnt" >"$LOGS/passthrough_hp.log" 2>&1 9>&- &
    pid=$!
    STARTED_PIDS+=("$pid")
    wait_mounted "$mnt" fuse "$pid" ||
        { cat "$LOGS/passthrough_hp.log" >&2; die "passthrough_hp did not mount"; }
    TDIR[passthrough-hp]=$mnt TPID[passthrough-hp]=$pid
}

setup_tessera() {       # setup_tessera [TARGET [extra mount options...]]
    local t=${1:-tessera}
    shift || true
    local vol=$W/$t mnt=$W/$t-mnt url pid extra=("$@")
    mkdir -p "$vol/bucket" "$mnt"
    url="sqlite3://$vol/meta.db"
    ((EUID == 0)) || extra+=(--no-allow-other)
    # shellcheck disable=SC2086  # user-supplied option strings
    "$BIN/tessera" format "$url" benchvol --bucket "$vol/bucket" $FORMAT_OPTS >"$LOGS/$t-format.log" 2>&1 ||
        { cat "$LOGS/$t-format.log" >&2; die "tessera format failed"; }
    # shellcheck disable=SC2086
    "$BIN/tessera" mount "$url" "$mnt" -d --log "$LOGS/$t.log" "${extra[@]}" $MOUNT_OPTS \
        >"$LOGS/$t-mount.log" 2>&1 9>&- ||
        { cat "$LOGS/$t-mount.log" "$LOGS/$t.log" >&2; die "tessera mount failed"; }
    pid=$("$BIN/tessera" status "$url" | python3 -c '
import json, sys
for s in json.load(sys.stdin).get("Sessions", []):
    if s.get("MountPoint") == sys.argv[1]:
        print(s["ProcessID"])' "$mnt")
    [[ -n $pid ]] || die "cannot find the Tessera client PID"
    STARTED_PIDS+=("$pid")
    TDIR[$t]=$mnt TPID[$t]=$pid
}

# Writeback: the staging area lives in the volume's scratch directory (on the
# same file system as everything else), so it goes away with the run.
# --cache-size 0: no read cache, as for the tessera target (file storage).
# shellcheck disable=SC2086  # user-supplied option string
setup_tessera-wb() { setup_tessera tessera-wb --writeback --cache-dir "$W/tessera-wb/cache" --cache-size 0 $WB_OPTS; }

# Targets that run a job: tessera-wb only differs from tessera in how writes
# are acknowledged, so it runs the write jobs only.
runs_job() {            # runs_job TARGET JOBFILE
    [[ $1 != tessera-wb || $2 == seqwrite || $2 == randwrite ]]
}

for t in "${TARGET_LIST[@]}"; do
    log "setting up target $t"
    "setup_$t"
done

# ---------------------------------------------------------- machine facts ---
{
    echo "date=$(date -Is)"
    echo "host=$(hostname)"
    echo "nproc=$(nproc)"
    echo "cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "hypervisor=$(lscpu 2>/dev/null | awk -F': *' '/Hypervisor vendor/ {print $2}')"
    echo "mem_total=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "kernel=$(uname -r)"
    echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "workdir_fs=$(findmnt -rn -o FSTYPE,SOURCE,OPTIONS -T "$W" | head -1)"
    echo "fio=$(fio --version)"
    echo "libfuse=$(pkg-config --modversion fuse3)"
    echo "gcc=$(gcc --version | head -1)"
    if [[ -x $BIN/tessera ]]; then
        echo "tessera_binary=$TESSERA_SRC (built $(date -r "$TESSERA_SRC" '+%F %T'))"
        echo "tessera_head=$(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null | cut -c1-90)"
        echo "tessera_dirty_files=$(git -C "$REPO" status --porcelain 2>/dev/null | wc -l)"
    fi
    echo "format_opts=$FORMAT_OPTS"
    echo "mount_opts=$MOUNT_OPTS"
    echo "wb_opts=$WB_OPTS"
    echo "pristine_passthrough=$PRISTINE_PT"
    echo "targets=${TARGET_LIST[*]}"
    echo "quick=$QUICK"
    echo "only=$ONLY"
    echo "runtime=$RUNTIME"
    echo "size=$SIZE"
    echo "rw_size=$RW_SIZE"
    echo "procs=$PROCS"
    echo "rounds=$ROUNDS"
    echo "md_bytes=$MD_BYTES"
    echo "md_settle=$MD_SETTLE"
    echo "nofile=$NOFILE"
    echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "mem_available_start=$(awk '/^MemAvailable/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "workdir_fs_used_start=$(df -h --output=used,size "$W" | tail -1 | awk '{print $1 " of " $2}')"
} >"$RES/run.env"
# Short memory slows the write jobs of every target, and not alike: with
# 4-10 GiB of this 24 GiB machine left (other tmpfs data), 1 MiB sequential
# writes ran at 0.25-0.5x their usual speed, Tessera's (which also fills
# fresh buffers) more than passthrough_hp's (2026-12-06).
read -r MEM_TOTAL_KB MEM_AVAIL_KB < <(awk '/^MemTotal/ {t = $2} /^MemAvailable/ {a = $2} END {print t, a}' /proc/meminfo)
if ((MEM_AVAIL_KB * 10 < MEM_TOTAL_KB * 6)); then
    log "warning: only $((MEM_AVAIL_KB / 1048576)) of $((MEM_TOTAL_KB / 1048576)) GiB of memory available; write figures will be low (free memory, e.g. old files on tmpfs, first)"
    echo "low_memory_warning=1" >>"$RES/run.env"
fi
ps -eo pcpu,rss,comm --sort=-pcpu | head -8 >"$LOGS/top-start.txt"

# ------------------------------------------------------------- fio suite ---
proc_cpu_s() {          # user+system CPU seconds of a process (all threads); 0 if none
    [[ -n ${1:-} && -r /proc/$1/stat ]] || { echo 0; return; }
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz }' "/proc/$1/stat"
}

# Round k (1-based) of --rounds: its results are NAME.TARGET.rK.* (plain
# NAME.TARGET.* with one round), its targets in TARGET_LIST rotated k-1 places.
ROUND=1
round_suffix() { ((ROUNDS > 1)) && echo ".r$ROUND" || true; }
rotated_targets() {
    local n=${#TARGET_LIST[@]} i
    for ((i = 0; i < n; i++)); do echo "${TARGET_LIST[$(((i + ROUND - 1) % n))]}"; done
}

FAILURES=0
run_fio() {             # run_fio NAME JOBFILE TARGET [VAR=VALUE ...]
    local name=$1 job=$2 t=$3 dir c0 c1 t0 t1 rc=0 out
    shift 3
    out=$RES/fio/$name.$t$(round_suffix)
    dir=${TDIR[$t]}/fio
    mkdir -p "$dir"
    c0=$(proc_cpu_s "${TPID[$t]:-}") t0=$(date +%s.%N)
    env DIR="$dir" SIZE="$SIZE" RUNTIME="$RUNTIME" NUMJOBS=1 IODEPTH=1 TIME_BASED=1 "$@" \
        timeout -k 10 $((RUNTIME * 10 + 600)) \
        fio "$BENCH/fio/$job.fio" --output-format=json --output="$out.json" \
        2>"$LOGS/fio-$name.$t$(round_suffix).err" 9>&- || rc=$?
    c1=$(proc_cpu_s "${TPID[$t]:-}") t1=$(date +%s.%N)
    awk -v rc="$rc" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
        'BEGIN { printf "rc=%d daemon_cpu_s=%.2f wall_s=%.2f loadavg=%s\n", rc, c1 - c0, t1 - t0, load }' \
        >"$out.info"
    if ((rc)); then
        FAILURES=$((FAILURES + 1))
        log "  fio $name on $t FAILED (rc=$rc): $(tail -3 "$LOGS/fio-$name.$t$(round_suffix).err" | tr '\n' ' ')"
    fi
}

# name | job file | variables. Each job runs on every target before the next
# job starts, so slow drifts in the (shared) machine's load hit all alike.
FIO_JOBS=(
    "seqread-pass1|seqread|NUMJOBS=1 TIME_BASED=0"
    "seqread-1j|seqread|NUMJOBS=1"
    "seqread-2j|seqread|NUMJOBS=2"
    "randread-qd1|randread|IODEPTH=1"
    "randread-qd8|randread|IODEPTH=8"
    "randread-qd32|randread|IODEPTH=32"
    "seqwrite-1j|seqwrite|NUMJOBS=1"
    "seqwrite-2j|seqwrite|NUMJOBS=2"
    "randwrite-1j|randwrite|NUMJOBS=1 SIZE=$RW_SIZE"
    "randwrite-2j|randwrite|NUMJOBS=2 SIZE=$RW_SIZE"
)

run_fio_suite() {
    local t spec name job vars
    log "fio: laying out the $SIZE read file on each target"
    for t in "${TARGET_LIST[@]}"; do
        if runs_job "$t" prep; then ROUND=1 run_fio prep prep "$t"; fi
    done
    for spec in "${FIO_JOBS[@]}"; do
        IFS='|' read -r name job vars <<<"$spec"
        for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
            for t in $(rotated_targets); do
                runs_job "$t" "$job" || continue
                # The first pass over the read file is one: not repeated.
                [[ $name == seqread-pass1 ]] && ((ROUND > 1)) && continue
                log "fio $name on $t$( ((ROUNDS > 1)) && echo " (round $ROUND of $ROUNDS)")"
                # shellcheck disable=SC2086  # vars is a list of VAR=VALUE words
                run_fio "$name" "$job" "$t" $vars
                # Every write job writes new files (in the next round too):
                # not over what the last one left.
                [[ $job == *write ]] && rm -f "${TDIR[$t]}/fio/$job".*
            done
        done
    done
    for t in "${TARGET_LIST[@]}"; do rm -rf "${TDIR[$t]}/fio"; done
}

# --------------------------------------------------------- metadata suite ---
# Keep the inodes alive at once under the fd limit (passthrough_ll: one fd each).
FLAT_NP=$MD_FLAT_N
if ((PROCS * MD_FLAT_N > NOFILE - 2000)); then
    FLAT_NP=$(((NOFILE - 2000) / PROCS))
    log "flat run with $PROCS processes: -n $FLAT_NP per process (fd limit $NOFILE)"
fi
MD_VARIANTS=(
    "tree-1p|$MD_TREE1 -P 1"
    "tree-${PROCS}p|$MD_TREEP -P $PROCS"
    "flat-1p|-n $MD_FLAT_N -P 1"
    "flat-${PROCS}p|-n $FLAT_NP -P $PROCS"
)
run_md_suite() {
    local t spec name args dir rc base
    for spec in "${MD_VARIANTS[@]}"; do
        IFS='|' read -r name args <<<"$spec"
        for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
            for t in $(rotated_targets); do
                [[ $t == tessera-wb ]] && continue   # write jobs only
                log "mdbench $name ($args) on $t$( ((ROUNDS > 1)) && echo " (round $ROUND of $ROUNDS)")"
                dir=${TDIR[$t]}/md-$name
                base=$name.$t$(round_suffix)
                rc=0
                # shellcheck disable=SC2086  # args is a list of options
                timeout -k 10 1800 "$BIN/mdbench" -d "$dir" $args -w "$MD_BYTES" -e "$MD_BYTES" \
                    -S "$MD_SETTLE" -t "$name" \
                    >"$RES/md/$base.txt" 2>"$LOGS/mdbench-$base.err" 9>&- || rc=$?
                if ((rc)); then
                    FAILURES=$((FAILURES + 1))
                    log "  mdbench $name on $t FAILED (rc=$rc): $(head -3 "$LOGS/mdbench-$base.err" | tr '\n' ' ')"
                fi
                rm -rf "$dir"
            done
        done
    done
}

# ------------------------------------------------------------------- run ---
[[ $ONLY == md ]] || run_fio_suite
[[ $ONLY == fio ]] || run_md_suite

# ----------------------------------------------------------------- report ---
{
    echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "elapsed_s=$(($(date +%s) - START_TS))"
    echo "failures=$FAILURES"
} >>"$RES/run.env"
ps -eo pcpu,rss,comm --sort=-pcpu | head -8 >"$LOGS/top-end.txt"
for t in "${TARGET_LIST[@]}"; do
    [[ -n ${TPID[$t]:-} ]] && echo "$t $(proc_cpu_s "${TPID[$t]}")" >>"$RES/daemon-cpu-total.txt"
done

mkdir -p "$(dirname "$OUT")"
python3 "$BENCH/report.py" "$RES" >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
if [[ -n $RAW ]]; then
    rm -rf "$RAW" && mkdir -p "$RAW" && cp -r "$RES"/. "$RAW"/
    log "raw results kept in $RAW"
fi
log "report written to $OUT ($(($(date +%s) - START_TS)) s, $FAILURES failure(s))"
