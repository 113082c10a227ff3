#!/usr/bin/env bash
# A real S3-compatible server on loopback that verifies AWS Signature V4 (and
# V2): OpenStack Swift (account, container, object servers and a proxy with the
# s3api and tempauth middlewares) plus a private memcached, all from the Debian
# packages. See docs/s3-test-server.md.
#
#   s3-server.sh start DIR   # build config, rings and devices under DIR, start
#                            # the daemons, wait until they answer, write DIR/env
#   s3-server.sh stop DIR    # stop everything started for DIR (idempotent)
#
# Everything lives under DIR: configs and rings (DIR/etc), the device
# (DIR/srv/d1), pid files (DIR/run), logs (DIR/*.log). Nothing is read from
# /etc/swift and no system service is used: memcached and the four Swift
# servers are private processes on free loopback ports.
#
# Environment:
#   PORT                       S3 endpoint port (default: a free loopback port;
#                              a start that loses one of its picked ports to
#                              another process is retried on others, 5 tries)
#   S3_SERVER_START_TIMEOUT    seconds to wait for the servers (default 30)
#
# DIR/env holds `export` lines for TESSERA_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY and AWS_REGION. Path-style requests go to the endpoint;
# virtual-hosted requests use the Host header BUCKET.localhost:PORT.
set -euo pipefail

readonly ACCESS_KEY='tessera:tester'          # tempauth account:user
readonly SECRET_KEY='tessera-s3-test-secret'
readonly REGION='us-east-1'
readonly STORAGE_DOMAIN='localhost'
readonly SERVERS=(memcached account-server container-server object-server proxy-server)
# Swift is a Debian python3 package; never use a python3 from PATH (pyenv, venv).
readonly PY=/usr/bin/python3

die() { echo "s3-server: $*" >&2; exit 1; }

usage() { die "usage: $0 start|stop DIR"; }

# Sets REPLY to the start time of live process PID (field 22 of
# /proc/PID/stat), or to "" if it is gone or a zombie. Recorded next to the
# pid, it guards against signalling a recycled pid. No forks: stop polls it.
proc_start() {
  local stat fields
  REPLY=
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
  read -r -a fields <<<"${stat##*) }"   # drop "pid (comm) ", comm may hold spaces
  [[ ${fields[0]} == Z ]] || REPLY=${fields[19]}
}

# Stops the processes recorded in DIR/run/*.pid: TERM, then KILL after 10 s.
stop_all() {
  local dir=$1 f pid start pids=() alive i
  [[ -d $dir/run ]] || return 0
  for f in "$dir"/run/*.pid; do
    [[ -e $f ]] || continue
    pid='' start=''
    read -r pid start <"$f" || true
    proc_start "${pid:-0}"
    if [[ -n $pid && -n $REPLY && $REPLY == "$start" ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid:$start")
    fi
    rm -f "$f"
  done
  for ((i = 0; i < 200 && ${#pids[@]} > 0; i++)); do
    alive=()
    for f in "${pids[@]}"; do
      proc_start "${f%%:*}"
      [[ $REPLY != "${f#*:}" ]] || alive+=("$f")
    done
    pids=("${alive[@]+"${alive[@]}"}")
    ((${#pids[@]} == 0)) || sleep 0.05
  done
  for f in "${pids[@]+"${pids[@]}"}"; do
    echo "s3-server: pid ${f%%:*} ignored SIGTERM for 10 s, killing it" >&2
    kill -KILL "${f%%:*}" 2>/dev/null || true
  done
}

# Starts "$@" in the background with its output in DIR/NAME.log and records
# "PID STARTTIME" in DIR/run/NAME.pid.
spawn() {
  local dir=$1 name=$2
  shift 2
  (
    local fd
    for fd in "/proc/$BASHPID"/fd/*; do   # keep no fd of our caller (pipes, make's jobserver)
      fd=${fd##*/}
      ((fd <= 2)) || eval "exec $fd>&-" 2>/dev/null || true
    done
    exec "$@" </dev/null >>"$dir/$name.log" 2>&1
  ) &
  local pid=$!
  proc_start "$pid"
  echo "$pid $REPLY" >"$dir/run/$name.pid"
}

write_server_conf() {   # DIR NAME PORT EGG
  local dir=$1 name=$2 port=$3 egg=$4
  cat >"$dir/etc/$name.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
workers = 0
user = $RUN_USER
swift_dir = $dir/etc
devices = $dir/srv
mount_check = false
disable_fallocate = true
fallocate_reserve = 0
db_preallocation = false
# Generous timeouts for busy CI hosts. An object PUT or DELETE waits for its
# container listing update: no updater daemon runs to replay a late one.
node_timeout = 30
conn_timeout = 5
container_update_timeout = 30
log_name = $name
log_level = INFO

[pipeline:main]
pipeline = healthcheck $name

[app:$name]
use = egg:swift#$egg

[filter:healthcheck]
use = egg:swift#healthcheck
EOF
}

write_proxy_conf() {    # DIR PORT MEMCACHED_PORT
  local dir=$1 port=$2 mc_port=$3
  cat >"$dir/etc/proxy-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
workers = 0
user = $RUN_USER
swift_dir = $dir/etc
log_name = proxy-server
log_level = INFO

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo versioned_writes proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
node_timeout = 30
conn_timeout = 5

[filter:s3api]
use = egg:swift#s3api
location = $REGION
storage_domain = $STORAGE_DOMAIN

[filter:tempauth]
use = egg:swift#tempauth
user_${ACCESS_KEY%%:*}_${ACCESS_KEY#*:} = $SECRET_KEY .admin

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$mc_port

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo

[filter:versioned_writes]
use = egg:swift#versioned_writes
EOF
}

# The Swift launcher, run once per start. It does what swift-ring-builder
# (create 4 1 0; add r1z1-127.0.0.1:PORT/d1 1; rebalance) and the four
# swift-*-server scripts do, through the same library calls, but:
# - the swift-*-server scripts read /etc/swift/swift.conf whatever swift_dir
#   says; this points Swift at DIR/etc/swift.conf before anything loads it;
# - it pays for Python, eventlet and Swift start-up once, then forks the four
#   servers (as Swift forks its own workers): ~1 CPU-second in all instead of
#   ~1 per server plus ~1 per swift-ring-builder run (nine of them);
# - it applies Swift's eventlet monkey patching before importing Swift, which
#   keeps eventlet's scan of existing locks cheap (~3 s otherwise), and skips
#   eventlet's dnspython resolver (all addresses are IPs);
# - servers log only to stderr: Swift's syslog handler (/dev/log, else UDP
#   localhost:514) is replaced by a null handler.
# Each server writes DIR/run/NAME.pid ("PID STARTTIME") and logs to DIR/NAME.log.
write_launcher() {
  cat >"$1/etc/swift-run.py" <<'EOF'
import configparser
import logging
import os
import sys
import traceback

os.closerange(3, os.sysconf('SC_OPEN_MAX'))  # the servers keep no fd of our caller
os.environ.setdefault('EVENTLET_NO_GREENDNS', 'yes')
import eventlet.patcher
eventlet.patcher.monkey_patch(all=False, socket=True, select=True, thread=True)

base = sys.argv[1]
ports = dict(arg.split('=') for arg in sys.argv[2:])  # account=PORT ...
swift_dir = base + '/etc'
from swift.common import storage_policy, utils
utils.set_swift_dir(swift_dir)
storage_policy.reload_storage_policies()


class NoSyslog(logging.NullHandler):
    def __init__(self, *args, **kwargs):
        super().__init__()


# Servers log to stderr (their DIR/NAME.log), never to the host's syslog.
utils.ThreadSafeSysLogHandler = NoSyslog

import pkg_resources
from swift.common.ring import RingBuilder
from swift.common.wsgi import run_wsgi
from swift.obj import server as object_server

for ring in ('account', 'container', 'object'):
    port = int(ports[ring])
    builder = RingBuilder(4, 1, 0)  # 2^4 partitions, 1 replica
    builder.add_dev({'region': 1, 'zone': 1, 'ip': '127.0.0.1', 'port': port,
                     'replication_ip': '127.0.0.1', 'replication_port': port,
                     'device': 'd1', 'weight': 1, 'meta': ''})
    builder.rebalance()
    builder.get_ring().save('%s/%s.ring.gz' % (swift_dir, ring))
    builder.save('%s/%s.builder' % (swift_dir, ring))

# Import every app and middleware the configs name, so the servers share them.
for ring in ('account', 'container', 'object', 'proxy'):
    conf = configparser.RawConfigParser()
    conf.read('%s/%s-server.conf' % (swift_dir, ring))
    for section in conf.sections():
        use = conf.get(section, 'use', fallback='')
        if use.startswith('egg:swift#'):
            group = 'paste.%s_factory' % ('app' if section.startswith('app:') else 'filter')
            pkg_resources.load_entry_point('swift', group, use[len('egg:swift#'):])

for ring in ('account', 'container', 'object', 'proxy'):
    server = ring + '-server'
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            log = os.open('%s/%s.log' % (base, server), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(null)
            os.close(log)
            kwargs = {'verbose': True}  # log to stderr, i.e. DIR/NAME.log
            if server == 'object-server':
                kwargs['global_conf_callback'] = object_server.global_conf_callback
            status = run_wsgi('%s/%s.conf' % (swift_dir, server), server, **kwargs)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(status or 0)
    with open('/proc/%d/stat' % pid) as f:
        start = f.read().rsplit(')', 1)[1].split()[19]
    with open('%s/run/%s.pid' % (base, server), 'w') as f:
        f.write('%d %s\n' % (pid, start))
EOF
}

# Prints five free loopback TCP ports: memcached, account, container, object,
# proxy (the proxy gets $PORT if set, which must be free).
pick_ports() {
  "$PY" - "${PORT:-0}" <<'EOF'
import socket, sys

fixed = int(sys.argv[1])
socks, ports = [], []
while len(ports) < (4 if fixed else 5):
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    socks.append(s)
    if s.getsockname()[1] != fixed:
        ports.append(s.getsockname()[1])
if fixed:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
    try:
        s.bind(('127.0.0.1', fixed))
    except OSError as e:
        sys.exit('s3-server: PORT=%d: %s' % (fixed, e.strerror))
    socks.append(s)
    ports.append(fixed)
print(*ports)
EOF
}

# Waits until each server NAME listens on its PORT and answers there (swift:
# GET /healthcheck, memcached: "version"). Fails at once if a server died or
# if another process also listens on its port (eventlet sets SO_REUSEPORT, so
# a second server on the same port would silently share it), and after
# TIMEOUT seconds otherwise.
wait_ready() {          # DIR TIMEOUT NAME=PORT...
  "$PY" - "$@" <<'EOF'
import os, socket, sys, time, urllib.request

run_dir, timeout = sys.argv[1] + '/run', float(sys.argv[2])
servers = dict(arg.split('=') for arg in sys.argv[3:])
deadline = time.monotonic() + timeout
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

def fail(msg):
    sys.exit('s3-server: ' + msg)

def our_pid(name):
    """The pid recorded for NAME if that process still runs, else None."""
    pid, start = (open('%s/%s.pid' % (run_dir, name)).read().split() + [''])[:2]
    try:
        stat = open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return pid if stat[0] != 'Z' and stat[19] == start else None

def listeners(port):
    """Inodes of the TCP sockets listening on 127.0.0.1:PORT."""
    inodes = []
    with open('/proc/net/tcp') as f:
        for line in f.readlines()[1:]:
            field = line.split()
            if field[1] == '0100007F:%04X' % int(port) and field[3] == '0A':
                inodes.append(field[9])
    return inodes

def socket_inodes(pid):
    inodes = set()
    for fd in os.listdir('/proc/%s/fd' % pid):
        try:
            link = os.readlink('/proc/%s/fd/%s' % (pid, fd))
        except OSError:
            continue
        if link.startswith('socket:['):
            inodes.add(link[8:-1])
    return inodes

def answers(name, port):
    if name == 'memcached':
        with socket.create_connection(('127.0.0.1', port), timeout=1) as s:
            s.sendall(b'version\r\n')
            return s.recv(64).startswith(b'VERSION')
    url = 'http://127.0.0.1:%s/healthcheck' % port
    with opener.open(url, timeout=2) as r:
        return r.status == 200

pending = list(servers)
while pending:
    name = pending[0]
    pid = our_pid(name)
    if pid is None:
        fail('%s exited during startup' % name)
    inodes = listeners(servers[name])
    mine = socket_inodes(pid)
    if any(inode not in mine for inode in inodes):
        fail('port %s of %s is also used by another process'
             % (servers[name], name))
    try:
        if inodes and answers(name, int(servers[name])):
            pending.pop(0)
            continue
    except OSError:
        pass
    if time.monotonic() > deadline:
        fail('%s did not answer within %g s' % (name, timeout))
    time.sleep(0.05)
EOF
}

# One try at starting every server on newly picked ports; sets proxy_port
# (the caller's local).
try_start() {
  local dir=$1 ports mc_port acct_port cont_port obj_port
  ports=$(pick_ports) || return 1
  read -r mc_port acct_port cont_port obj_port proxy_port <<<"$ports"

  # Called as `try_start ... && break`, where set -e does not act: every
  # step says itself when it failed.
  cat >"$dir/etc/swift.conf" <<EOF || return 1
[swift-hash]
swift_hash_path_prefix = tessera-test
swift_hash_path_suffix = tessera-test

[storage-policy:0]
name = Policy-0
default = yes
EOF
  write_server_conf "$dir" account-server "$acct_port" account || return 1
  write_server_conf "$dir" container-server "$cont_port" container || return 1
  write_server_conf "$dir" object-server "$obj_port" object || return 1
  write_proxy_conf "$dir" "$proxy_port" "$mc_port" || return 1
  write_launcher "$dir" || return 1

  local mc_user=()
  [[ $(id -u) != 0 ]] || mc_user=(-u root)   # memcached refuses root without -u
  spawn "$dir" memcached memcached -l 127.0.0.1 -p "$mc_port" -U 0 -m 64 "${mc_user[@]}" || return 1
  "$PY" "$dir/etc/swift-run.py" "$dir" account="$acct_port" container="$cont_port" \
    object="$obj_port" >>"$dir/swift-run.log" 2>&1 || return 1
  wait_ready "$dir" "${S3_SERVER_START_TIMEOUT:-30}" memcached="$mc_port" \
    account-server="$acct_port" container-server="$cont_port" \
    object-server="$obj_port" proxy-server="$proxy_port"
}

start() {
  local dir=$1 name
  for name in memcached "$PY"; do
    command -v "$name" >/dev/null || die "$name not found; apt-get install memcached python3-swift"
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if compgen -G "$dir/run/*.pid" >/dev/null; then
    die "$dir/run has pid files: run '$0 stop $dir' first"
  fi
  rm -rf "${dir:?}/etc" "$dir/run" "$dir/env"   # a restart keeps DIR/srv (the data)
  mkdir -p "$dir/etc" "$dir/srv/d1" "$dir/run"
  # The object server keeps metadata in user xattrs (tmpfs before Linux 6.6 lacks them).
  "$PY" -c 'import os, sys; os.setxattr(sys.argv[1], "user.s3-server-probe", b"1")' "$dir/srv/d1" 2>/dev/null ||
    die "$dir does not support user xattrs (tmpfs?); pick a DIR on ext4/xfs"

  RUN_USER=$(id -un)   # Swift drops privileges to this user: ourselves, root included
  # Free ports are picked, then bound by the servers: another test may take
  # one in between. Such a try fails (a server exits or shares its port) and
  # is retried on other ports, unless PORT was given.
  local try tries=5 proxy_port
  [[ -z ${PORT:-} ]] || tries=1
  for ((try = 1; ; try++)); do
    try_start "$dir" && break
    stop_all "$dir"
    if ((try >= tries)); then
      echo "s3-server: servers in $dir failed to start" >&2
      for name in swift-run "${SERVERS[@]}"; do
        [[ -s $dir/$name.log ]] || continue
        echo "--- tail $dir/$name.log" >&2
        tail -n 20 "$dir/$name.log" >&2
      done
      exit 1
    fi
    echo "s3-server: try $try failed; trying other ports" >&2
    for name in swift-run "${SERVERS[@]}"; do rm -f "$dir/$name.log"; done
  done

  cat >"$dir/env" <<EOF
export TESSERA_TEST_S3_ENDPOINT=http://127.0.0.1:$proxy_port
export AWS_ACCESS_KEY_ID='$ACCESS_KEY'
export AWS_SECRET_ACCESS_KEY='$SECRET_KEY'
export AWS_REGION=$REGION
EOF
}

(($# == 2)) || usage
case $1 in
  start) start "$2" ;;
  stop) stop_all "$2" ;;
  *) usage ;;
esac
