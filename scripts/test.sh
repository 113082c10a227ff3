#!/usr/bin/env bash
# Runs every test: the normal build (unit tests + end-to-end tests against real
# mounts), then unit and end-to-end tests under ASan+UBSan, then the concurrent
# layers' unit tests under TSan. Needs root (FUSE mounts, setuid for the
# unprivileged-user cases) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

START=$SECONDS
step() { printf '\n==== [%dm%02ds] %s\n' $(((SECONDS - START) / 60)) $(((SECONDS - START) % 60)) "$*"; }

step "build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_LINE_TABLES_ONLY=ON >/dev/null
ninja -C build -j "$JOBS"
# The unit tests of the backends (label "backend": Redis, PostgreSQL and S3,
# each against its own private server), the end-to-end suites on those
# servers (label "servers") and the short fault campaigns (which mostly wait
# on outages and timeouts) run side by side, each with its own servers and
# volumes; everything else one at a time.
step "tests (RelWithDebInfo)"
ctest --test-dir build --output-on-failure -j 1 -LE 'campaign|backend|servers'
step "backend unit tests, suites on servers and short campaigns (RelWithDebInfo), side by side"
ctest --test-dir build --output-on-failure -j 7 -L 'campaign|backend|servers'

if [ "${TESSERA_SKIP_SANITIZERS:-0}" != 1 ]; then
  step "build (ASan+UBSan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=address -DTESSERA_LINE_TABLES_ONLY=ON >/dev/null
  ninja -C build-asan -j "$JOBS"
  step "tests (ASan+UBSan)"
  # The project build inside a mount, and the suites on Redis/PostgreSQL + S3
  # (the same client code as the other suites, slowed by the S3 server), and
  # the Debian package's test, are left to the normal run.
  ASAN_OPTIONS=detect_leaks=1 TESSERA_E2E_QUICK=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-asan --output-on-failure -j 1 -E e2e_build -LE 'servers|package|backend'
  ASAN_OPTIONS=detect_leaks=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-asan --output-on-failure -j 4 -L backend

  step "build (TSan: concurrent layers)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=thread -DTESSERA_LINE_TABLES_ONLY=ON >/dev/null
  # The fuzz targets' replays (single-threaded parsers) run under ASan above, not here.
  ninja -C build-tsan -j "$JOBS" common_test kv_test meta_test vfs_test object_test chunk_test fuse_test
  step "tests (TSan)"
  TSAN_OPTIONS=halt_on_error=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-tsan --output-on-failure -j 1 -L unit -LE 'backend|fuzz'
  TSAN_OPTIONS=halt_on_error=1 TESSERA_TEST_QUICK=1 ctest --test-dir build-tsan --output-on-failure -j 4 -L backend
fi
step "all tests passed"
