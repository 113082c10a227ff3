#!/usr/bin/env bash
# Installs the dependencies, builds Tessera, formats a default volume
# (SQLite metadata + local directory for data) and mounts it in the background.
# Usage: scripts/quickstart.sh [MOUNTPOINT]   (default /mnt/tessera; run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
MNT=${1:-/mnt/tessera}
STATE=/var/lib/tessera
META="sqlite3://$STATE/myvol.db"

bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build tessera
install -m 755 build/src/tessera /usr/local/bin/tessera

mkdir -p "$STATE" "$MNT"
if ! tessera status "$META" >/dev/null 2>&1; then
  tessera format "$META" myvol --bucket "$STATE/myvol" >/dev/null
fi
if mountpoint -q "$MNT"; then
  echo "$MNT is already mounted"
else
  tessera mount "$META" "$MNT" -d --log /var/log/tessera.log
fi
df -h "$MNT"
