#!/usr/bin/env bash
# Runs every test: the normal build (unit tests + end-to-end tests against real
# mounts), then unit and end-to-end tests under ASan+UBSan, then the concurrent
# layers' unit tests under TSan. Needs root (FUSE mounts, setuid for the
# unprivileged-user cases) and /dev/fuse.
#
# Time: the normal build's tests mostly wait (on mounts, servers, outages and
# timeouts; about 2 min of CPU in 15 min), so the two sanitizer builds run
# meanwhile in the background at the lowest CPU priority (nice 19: a test
# that wants the CPU gets it). Set TESSERA_SERIAL_BUILDS=1 to build them
# one after the other instead (for a machine that is short of memory).
# On 2 cores the whole run is CPU-bound: sampled every 10 s (2026-12-06),
# both cores were 99% busy from the first build until the sanitizer lanes'
# last minutes (42.5 min in all). What shortens it is less CPU (fewer or
# cheaper compiles and tests), not more overlap.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
SANITIZERS=$([ "${TESSERA_SKIP_SANITIZERS:-0}" = 1 ] && echo 0 || echo 1)

START=$SECONDS
step() { printf '\n==== [%dm%02ds] %s\n' $(((SECONDS - START) / 60)) $(((SECONDS - START) % 60)) "$*"; }

# The TSan build: only the concurrent layers' unit tests (the fuzz targets'
# replays are single-threaded parsers and run under ASan), and of those not
# the suites whose code runs on one thread (TESSERA_TEST_SKIP in
# tests/CMakeLists.txt).
TSAN_TARGETS="common_test kv_test meta_test vfs_test object_test chunk_test fuse_test"
sanitizer_builds() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=address -DTESSERA_LINE_TABLES_ONLY=ON >/dev/null &&
    ninja -C build-asan -j "$JOBS" &&
    cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=thread -DTESSERA_LINE_TABLES_ONLY=ON >/dev/null &&
    ninja -C build-tsan -j "$JOBS" $TSAN_TARGETS
}

step "build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_LINE_TABLES_ONLY=ON >/dev/null
ninja -C build -j "$JOBS"

# Background jobs (the sanitizer builds, the TSan and ASan backend tests) are
# stopped with everything they started when this script exits early (a
# failure under set -e, an interrupt): none is left running or mounting.
BG_BUILD='' TSAN_TESTS='' ASAN_BACKEND_TESTS=''
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stop_background() {
  local job
  for job in $BG_BUILD $TSAN_TESTS $ASAN_BACKEND_TESTS; do
    kill -0 "$job" 2>/dev/null && kill_tree "$job"
  done
  true
}
trap stop_background EXIT
BG_LOG=$(mktemp /tmp/tessera-sanitizer-builds.XXXXXX.log)
if [ "$SANITIZERS" = 1 ] && [ "${TESSERA_SERIAL_BUILDS:-0}" != 1 ]; then
  step "sanitizer builds (ASan+UBSan, TSan) start in the background, nice 19 (log: $BG_LOG)"
  (renice -n 19 -p "$BASHPID" >/dev/null && sanitizer_builds) >"$BG_LOG" 2>&1 &
  BG_BUILD=$!
fi

# The unit tests of the backends (label "backend": Redis, PostgreSQL and S3,
# each against its own private server), the end-to-end suites on those
# servers (label "servers") and the short fault campaigns (which mostly wait
# on outages and timeouts) run side by side, each with its own servers and
# volumes; everything else one at a time.
step "tests (RelWithDebInfo)"
ctest --test-dir build --output-on-failure -j 1 -LE 'campaign|backend|servers'
step "backend unit tests, suites on servers and short campaigns (RelWithDebInfo), side by side"
ctest --test-dir build --output-on-failure -j 7 -L 'campaign|backend|servers'

if [ "$SANITIZERS" = 1 ]; then
  if [ -n "$BG_BUILD" ]; then
    step "waiting for the sanitizer builds"
    if ! wait "$BG_BUILD"; then
      BG_BUILD=
      tail -n 100 "$BG_LOG"
      echo "test.sh: the sanitizer builds failed (above; whole log: $BG_LOG)" >&2
      exit 1
    fi
    BG_BUILD=
    grep -E '^\[[0-9]+/[0-9]+\] Linking' "$BG_LOG" | tail -n 2
  else
    step "sanitizer builds (ASan+UBSan, TSan)"
    sanitizer_builds
  fi
  rm -f "$BG_LOG"

  # The TSan tests (CPU-bound unit tests) run beside the ASan ones (whose
  # end-to-end suites leave most of a core idle); their output follows.
  step "tests (ASan+UBSan), and beside them the tests (TSan)"
  TSAN_LOG=$(mktemp /tmp/tessera-tsan-tests.XXXXXX.log)
  # The backends' unit tests under ASan (each with its own servers) start once
  # the CPU-bound TSan unit tests are done (a subshell cannot wait for its
  # sibling: it polls for the file the TSan job leaves, or its end), beside
  # the TSan job's own backend tests: both mostly wait on servers and
  # timeouts. So they too run beside the ASan end-to-end suites instead of
  # after them; then, in the same lane, a few of those suites (ASAN_SIDE),
  # which balances the two lanes (about 9 min each).
  ASAN_SIDE='^(e2e_fsx|e2e_observe|e2e_gc|e2e_rmr|e2e_clone)$'
  ASAN_BACKEND_LOG=$(mktemp /tmp/tessera-asan-backend-tests.XXXXXX.log)
  TSAN_UNIT_DONE=$(mktemp -u /tmp/tessera-tsan-unit-done.XXXXXX)
  (
    tsan_unit=0
    TSAN_OPTIONS=halt_on_error=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-tsan --output-on-failure -j 1 -L unit -LE 'backend|fuzz' || tsan_unit=1
    touch "$TSAN_UNIT_DONE"
    [ "$tsan_unit" = 0 ] && TSAN_OPTIONS=halt_on_error=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-tsan --output-on-failure -j 4 -L backend
  ) >"$TSAN_LOG" 2>&1 &
  TSAN_TESTS=$!
  (
    while [ ! -e "$TSAN_UNIT_DONE" ] && kill -0 "$TSAN_TESTS" 2>/dev/null; do sleep 2; done
    side_ok=0
    ASAN_OPTIONS=detect_leaks=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-asan --output-on-failure -j 4 -L backend || side_ok=1
    ASAN_OPTIONS=detect_leaks=1 TESSERA_E2E_QUICK=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-asan --output-on-failure -j 1 -R "$ASAN_SIDE" || side_ok=1
    exit "$side_ok"
  ) >"$ASAN_BACKEND_LOG" 2>&1 &
  ASAN_BACKEND_TESTS=$!
  # The project build inside a mount, the suites on Redis/PostgreSQL (+ S3)
  # (the same client code as the other suites; the engines' code runs under
  # ASan in the backend unit tests), the Debian package's test, and `tessera
  # bench`'s (its engines and stores run under ASan in their own tests; 43 s
  # of this lane, the one that ends last), are left to the normal run.
  asan_ok=1
  ASAN_OPTIONS=detect_leaks=1 TESSERA_E2E_QUICK=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-asan --output-on-failure -j 1 -E "e2e_build|e2e_redis|cli_bench|$ASAN_SIDE" -LE 'servers|package|backend' || asan_ok=0
  step "tests (TSan), then the backends' tests and the side lane's suites (ASan+UBSan), run beside the ASan tests"
  tsan_ok=1
  wait "$TSAN_TESTS" || tsan_ok=0
  TSAN_TESTS=
  cat "$TSAN_LOG"
  rm -f "$TSAN_LOG"
  wait "$ASAN_BACKEND_TESTS" || asan_ok=0
  ASAN_BACKEND_TESTS=
  cat "$ASAN_BACKEND_LOG"
  rm -f "$ASAN_BACKEND_LOG" "$TSAN_UNIT_DONE"
  [ "$asan_ok" = 1 ] || { echo "test.sh: ASan+UBSan tests failed (above)" >&2; exit 1; }
  [ "$tsan_ok" = 1 ] || { echo "test.sh: TSan tests failed (above)" >&2; exit 1; }
fi
step "all tests passed"
