#!/usr/bin/env bash
# A private, throwaway PostgreSQL server for tests.
#
#   pg-server.sh start DIR    initdb into DIR/data and start a server that
#                             listens on 127.0.0.1 at a free port and on a
#                             Unix socket in DIR/sock; writes DIR/env (shell
#                             exports, see below) and prints it
#   pg-server.sh restart DIR  restart that server (same port and socket)
#   pg-server.sh kill DIR     SIGKILL the server and all its processes (a
#                             crash: what was committed is in the WAL);
#                             `restart` starts it again (crash recovery)
#   pg-server.sh stop DIR     stop it and remove DIR
#
# DIR must not exist or be empty, and its parent must be traversable by the
# server's user. DIR/env exports:
#   TESSERA_TEST_PG_URL         postgres://tessera:PASSWORD@127.0.0.1:PORT/tessera
#   TESSERA_TEST_PG_SOCKET_URL  postgres://tessera@/tessera?host=DIR/sock&port=PORT
#   TESSERA_TEST_PG_RESTART     a command that restarts the server
# TCP connections need the password (scram-sha-256); Unix-socket connections
# are trusted (the socket directory is private, mode 0700).
#
# PostgreSQL refuses to run as root, so as root the server runs as the
# `postgres` system user of the Debian package (or `nobody`), and DIR is
# handed to it. Binaries come from /usr/lib/postgresql/<newest>/bin
# (apt package postgresql), or PG_BIN if set.
set -euo pipefail

die() { echo "pg-server.sh: $*" >&2; exit 1; }

find_bin() {
  if [ -n "${PG_BIN:-}" ]; then echo "$PG_BIN"; return; fi
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] || die "no /usr/lib/postgresql/*/bin/initdb: apt-get install postgresql"
  echo "$dir"
}

# Runs a command as the server's user.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$PG_USER" -- "$@"
  else
    "$@"
  fi
}

pick_user() {
  if [ "$(id -u)" -ne 0 ]; then
    PG_USER=$(id -un)
  elif id postgres >/dev/null 2>&1; then
    PG_USER=postgres
  else
    PG_USER=nobody
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cmd_start() {
  local dir=$1 bin port password
  bin=$(find_bin)
  pick_user
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
  mkdir -m 0700 "$dir/sock"
  if [ "$(id -u)" -eq 0 ]; then chown -R "$PG_USER:" "$dir"; fi
  chmod 0700 "$dir"
  password=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')

  # --no-sync: nothing here needs to survive a power loss; the server itself
  # runs with the default fsync settings.
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --no-sync --auth-local=trust --auth-host=scram-sha-256 \
    -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  # Only loopback TCP and our private socket directory.
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/sock'
max_connections = 200
CONF

  local attempt
  for attempt in 1 2 3; do
    port=$(free_port)
    echo "port = $port" >>"$dir/data/postgresql.conf"
    if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; then break; fi
    [ "$attempt" -lt 3 ] || { cat "$dir/server.log" >&2; die "pg_ctl start failed"; }
  done

  as_pg "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$port" -U postgres -d postgres >/dev/null <<SQL
CREATE ROLE tessera LOGIN PASSWORD '$password';
CREATE DATABASE tessera OWNER tessera;
SQL

  local restart="bash $(cd "$(dirname "$0")" && pwd)/pg-server.sh restart $dir"
  cat >"$dir/env" <<ENV
export TESSERA_TEST_PG_URL='postgres://tessera:$password@127.0.0.1:$port/tessera'
export TESSERA_TEST_PG_SOCKET_URL='postgres://tessera@/tessera?host=$dir/sock&port=$port'
export TESSERA_TEST_PG_RESTART='$restart'
ENV
  cat "$dir/env"
}

cmd_restart() {
  local dir=$1 bin
  bin=$(find_bin)
  pick_user
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -m fast restart >/dev/null
}

# The postmaster and its children (backends, checkpointer, walwriter...).
server_pids() {
  local dir=$1 pm
  pm=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
  [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null || return 0
  echo "$pm"
  pgrep -P "$pm" || true
}

cmd_kill() {
  local dir=$1 pids
  pids=$(server_pids "$dir")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  for _ in $(seq 1 200); do
    local alive=0 p
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.05
  done
  die "server processes still alive after SIGKILL: $pids"
}

cmd_stop() {
  local dir=$1 bin
  bin=$(find_bin)
  pick_user
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -w -t 60 -m fast stop >/dev/null || true
  fi
  rm -rf "$dir"
}

[ $# -eq 2 ] || die "usage: pg-server.sh start|restart|kill|stop DIR"
case $1 in
  start) cmd_start "$2" ;;
  restart) cmd_restart "$2" ;;
  kill) cmd_kill "$2" ;;
  stop) cmd_stop "$2" ;;
  *) die "usage: pg-server.sh start|restart|kill|stop DIR" ;;
esac
