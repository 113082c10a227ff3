#!/usr/bin/env bash
# The libFuzzer campaign for the decoders of stored and received bytes
# (tests/fuzz/README.md). Builds the fuzz targets with clang, ASan and UBSan
# in build-fuzz/ (its own build directory), runs each target N minutes on its
# seed corpus tests/fuzz/corpus/TARGET/, merges the new inputs that add
# coverage back into that corpus, and prints per target: runs, coverage,
# crashes. A crash stops that target's run; its input is minimized and left
# in build-fuzz/fuzz-work/TARGET/ (see the summary).
#
#   scripts/fuzz.sh [--minutes N] [TARGET...]     (default: 3 minutes, every target)
#
# Needs clang-14 and libFuzzer's runtime (Debian: clang-14 libclang-rt-14-dev),
# which scripts/install-deps.sh does not install: when they are missing they
# are installed with apt-get if we are root (or have sudo), else this says so.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

MINUTES=3
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) [ $# -ge 2 ] || usage 2; MINUTES=$2; shift 2 ;;
    --minutes=*) MINUTES=${1#--minutes=}; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage 2 ;;
    *) TARGETS+=("${1%_fuzz}"); shift ;;
  esac
done
if ! [[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "fuzz.sh: --minutes wants a number, not '$MINUTES'" >&2
  exit 2
fi
SECONDS_PER_TARGET=$(awk -v m="$MINUTES" 'BEGIN { s = int(m * 60); print (s < 1 ? 1 : s) }')

ALL=()
for f in tests/fuzz/*_fuzz.cc; do t=${f##*/}; ALL+=("${t%_fuzz.cc}"); done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
for t in "${TARGETS[@]}"; do
  if [ ! -f "tests/fuzz/${t}_fuzz.cc" ]; then
    echo "fuzz.sh: no target '$t' (have: ${ALL[*]})" >&2
    exit 2
  fi
done

CC=${FUZZ_CC:-clang-14}
CXX=${FUZZ_CXX:-clang++-14}
PKGS="clang-14 libclang-rt-14-dev"

# Can clang link a libFuzzer target with the sanitizers?
toolchain_ok() {
  command -v "$CXX" >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d)
  printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    >"$dir/t.cc"
  "$CXX" -fsanitize=fuzzer,address,undefined "$dir/t.cc" -o "$dir/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}

if ! toolchain_ok; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
    echo "fuzz.sh: $CXX with libFuzzer is missing; installing: apt-get install $PKGS"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
  fi
  if ! toolchain_ok; then
    echo "fuzz.sh: cannot build libFuzzer targets: $CXX -fsanitize=fuzzer,address,undefined does not link." >&2
    echo "fuzz.sh: install clang and libFuzzer's runtime, e.g. as root:" >&2
    echo "           apt-get install --no-install-recommends $PKGS" >&2
    echo "         (or point FUZZ_CC/FUZZ_CXX at another clang with libFuzzer)" >&2
    exit 1
  fi
fi

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
# -O1 without -DNDEBUG: the code's own assert()s are checked too. Clang does
# not know gcc's -Wshadow=local (cmake/Warnings.cmake): not an error here.
FLAGS="-fsanitize=fuzzer-no-link -Wno-unknown-warning-option"
echo "==== build ($BUILD, $CXX, libFuzzer + ASan + UBSan)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DTESSERA_SANITIZE=address -DTESSERA_LIBFUZZER=ON >/dev/null
nice -n 10 ninja -C "$BUILD" "${TARGETS[@]/%/_fuzz}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

SUMMARY=()
FAILED=0
for t in "${TARGETS[@]}"; do
  bin="$BUILD/tests/fuzz/${t}_fuzz"
  corpus="tests/fuzz/corpus/$t"
  work="$BUILD/fuzz-work/$t"
  rm -rf "$work"
  mkdir -p "$corpus" "$work/new" "$work/artifacts"
  before=$(find "$corpus" -type f | wc -l)
  echo "==== $t: ${SECONDS_PER_TARGET}s on $corpus ($before inputs)"
  rc=0
  nice -n 10 "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/new" "$corpus" >"$work/log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  line=$(grep -E '^#[0-9]+.*cov: ' "$work/log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  crashes=$(find "$work/artifacts" -type f | sort)
  # Keep the new inputs that reach new code: libFuzzer's merge picks a small
  # set of them (edges only, not hit counts, which would keep thousands of
  # JSON documents); the inputs already in the corpus stay as they are.
  nice -n 10 "$bin" -merge=1 -use_counters=0 -timeout=10 -max_len=4096 "$corpus" "$work/new" \
    >"$work/merge.log" 2>&1 || true
  after=$(find "$corpus" -type f | wc -l)
  bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.1f", s / 1024 }')
  status="ok"
  if [ -n "$crashes" ] || [ "$rc" -ne 0 ]; then
    FAILED=1
    status="CRASH (exit $rc)"
    for c in $crashes; do
      # A smaller input for the report.
      nice -n 10 "$bin" -minimize_crash=1 -runs=20000 -max_total_time=60 -exact_artifact_path="$c.min" "$c" \
        >"$work/minimize.log" 2>&1 || true
      status+=$'\n'"      input: $c"
      [ -f "$c.min" ] && status+=" (minimized: $c.min, $(stat -c %s "$c.min") bytes)"
    done
    status+=$'\n'"      log: $work/log"
    first=$(grep -m1 -E 'ERROR: |runtime error|fuzz invariant failed|deadly signal|terminate called' "$work/log" || true)
    [ -z "$first" ] || status+=$'\n'"      $first"
  fi
  SUMMARY+=("$(printf '%-12s runs %-9s cov %-5s ft %-6s corpus %s -> %s files (%s KiB)  %s' "$t" "${runs:-?}" \
    "${cov:-?}" "${ft:-?}" "$before" "$after" "$bytes" "$status")")
  echo "${SUMMARY[-1]}"
done

echo
echo "==== summary (${SECONDS_PER_TARGET}s per target)"
printf '%s\n' "${SUMMARY[@]}"
total=$(find tests/fuzz/corpus -type f -printf '%s\n' | awk '{ s += $1 } END { print int(s / 1024) }')
echo "corpus: ${total} KiB in $(find tests/fuzz/corpus -type f | wc -l) files in tests/fuzz/corpus"
[ "$total" -lt 512 ] || echo "fuzz.sh: the corpus passes 512 KiB: prune it (e.g. a fresh -merge=1 -use_counters=0 into an empty directory, keeping regress_*)" >&2
if [ "$FAILED" -ne 0 ]; then
  echo "A crash input, once its bug is fixed, belongs in tests/fuzz/corpus/TARGET/ as a regression input."
  exit 1
fi
