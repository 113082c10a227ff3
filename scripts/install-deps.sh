#!/usr/bin/env bash
# Installs the Debian 12 packages Tessera needs to build, run and test.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  libfuse3-dev fuse3 libsqlite3-dev sqlite3 \
  libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
  libhiredis-dev libpq-dev libcurl4-openssl-dev libssl-dev libzstd-dev liblz4-dev libxxhash-dev zlib1g-dev prometheus-cpp-dev \
  attr acl fio procps psmisc python3 iproute2 util-linux jq gzip libmount-dev libjemalloc-dev liburing-dev >/dev/null
# The Debian package and what its test uses: dpkg-shlibdeps, man, zsh, and
# systemd-analyze for the unit file.
$SUDO apt-get install -y -qq --no-install-recommends dpkg-dev man-db zsh systemd >/dev/null
# Servers the tests start themselves (tests/tools/with-*.sh): Redis, PostgreSQL,
# and an S3 server that verifies signatures (OpenStack Swift's library with its
# s3api middleware, docs/s3-test-server.md) with memcached; boto3 checks objects
# independently of our client; Prometheus scrapes a mount's --metrics.
$SUDO apt-get install -y -qq --no-install-recommends \
  redis-server postgresql memcached python3-swift python3-boto3 prometheus >/dev/null
# Installing the packages may start their system services; the tests use
# private instances on free ports and do not need them.
