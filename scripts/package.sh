#!/usr/bin/env bash
# Builds the Debian package of Tessera: scripts/package.sh [BUILD_DIR [OUT_DIR]]
# (defaults: build, dist). Configures BUILD_DIR as a RelWithDebInfo build if
# it is not one yet, builds it, and writes OUT_DIR/tessera_VERSION_ARCH.deb
# (binaries stripped; Depends computed by dpkg-shlibdeps). Install it with
#   apt install ./dist/tessera_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-dist}
JOBS=${JOBS:-$(nproc)}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD" -j "$JOBS" tessera tessera_docs
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
(cd "$BUILD" && cpack -G DEB -B "$OUT" >/dev/null)
rm -rf "$OUT/_CPack_Packages"
deb=$(ls -t "$OUT"/tessera_*.deb | head -1)
echo "$deb"
