#!/usr/bin/env python3
"""A seeded random file-system workload that journals what was acknowledged,
and the verifier that checks a mount against that journal.

The promise checked: once fsync/close/rename/unlink/mkdir/rmdir returned, the
data and metadata survive a crash of the client (and outages of the metadata
engine lose nothing acknowledged).

    crash_workload.py run    --dir D --journal J [--seed N] [--duration S] [--ops N]
                             [--ready FILE] [--events FILE] [--resolve-timeout S]
    crash_workload.py verify --dir D --journal J [--adopt]

`run` works in directory D (inside the mount; created if missing) on a small
fixed namespace (files f00..f11 in D, in four permanent subdirectories d0..d3
and in up to three transient subdirectories t0..t2), one operation at a time:
create (O_EXCL, write, fsync, close), append and overwrite (pwrite, possibly
past the end) followed by fsync, whole-file writes (O_TRUNC, write, close),
ftruncate + fsync (shrink or grow), renames of files within and across
directories (sometimes replacing a file), unlinks, mkdir/rmdir and renames of
transient directories (sometimes over an empty one).

The journal J lives outside the mount; every line is a JSON object, appended
and fsync'd before the next step:
    {"k":"start", ...}                      a run began (seed, run number)
    {"k":"intent","seq":N,"op":..,"outcomes":[{path: state}, ...]}
                                            before operation N: the states its
                                            affected paths may have once it
                                            is (partly) done; the state before
                                            it is always allowed too
    {"k":"done","seq":N,"state":{path: state}}
                                            operation N was acknowledged: this
                                            is now the state of those paths
    {"k":"observed","seq":N,"state":{..}}   operation N failed (EIO, ...) or was
                                            in flight at a crash; this is what
                                            the mount showed afterwards (one of
                                            the allowed states)
    {"k":"adopt","state":{..}}              verify --adopt: accept what is there
                                            after a reported problem, to go on
A state is null (gone), {"t":"d"} (a directory) or {"t":"f","size":N,"sha":H}
(a regular file with that length and sha256).

Only whole outcomes are allowed for the operation in flight (the pre-state or
one of the intent's outcomes, jointly over all its paths): e.g. a whole-file
write may leave the old file, an empty file (its O_TRUNC/O_CREAT is itself a
committed step) or the new content, never a mix; a rename moves both names or
neither.

`verify` rebuilds the acknowledged state from J, walks D and checks: every
path the journal says exists has exactly the acknowledged type, size and
sha256 (stat size == bytes read), every path said to be gone is gone, nothing
unknown to the journal exists, and the operation in flight at the crash (if
any) is either wholly applied or not. It prints one PROBLEM line per problem
and a summary line; exit 0 if no problem, 1 if problems, 3 if the mount is
gone (ENOTCONN), 2 on bad usage or an unreadable journal.

`run` first resolves an operation left in flight by the previous run (checks
the mount shows an allowed state, journals it), then works until --duration
seconds or --ops operations passed, or SIGTERM/SIGINT (finishes the current
operation, exit 0). When the mount dies under it (ENOTCONN, ECONNABORTED,
ENODEV) it stops at once with exit 3, leaving the intent unresolved. Any other
error (EIO, ETIMEDOUT, ...) is recorded in --events, the operation's outcome
is resolved by looking at the mount (retried until --resolve-timeout) and the
run goes on; operations slower than --slow seconds are recorded there too.
Exit 1 if the mount showed a state the journal does not allow.

Written data carries tags "<SSSSSSSS:OOOOOOOOOO>" (operation number, offset
within that write) every 4 KiB, so a wrong file content can be traced to the
write it came from. Contents of acknowledged files are kept in J.store/ (named
by sha256) for the next run and for reporting where a file differs.
Stdlib only (python3 >= 3.9).
"""

import argparse
import errno
import hashlib
import json
import os
import random
import re
import signal
import stat
import sys
import time

FIXED_DIRS = ["d0", "d1", "d2", "d3"]
TRANSIENT_DIRS = ["t0", "t1", "t2"]
FILE_NAMES = ["f%02d" % i for i in range(12)]
MOUNT_GONE = {errno.ENOTCONN, errno.ECONNABORTED, errno.ENODEV}
DIR = {"t": "d"}
TAG = re.compile(rb"<(\d{8}):(\d{10})>")
EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_MOUNT_GONE = 0, 1, 2, 3


class MountGone(Exception):
    pass


def sha(data):
    return hashlib.sha256(data).hexdigest()


def fstate(data):
    return {"t": "f", "size": len(data), "sha": sha(data)}


EMPTY = fstate(b"")


def show(state):
    if state is None:
        return "gone"
    if state.get("t") == "d":
        return "dir"
    if state.get("t") == "f":
        extra = " (stat says %d)" % state["stat_size"] if "stat_size" in state else ""
        return "file %d bytes sha %s%s" % (state["size"], state["sha"][:12], extra)
    if state.get("t") == "error":
        return "error %s" % state["errno"]
    return json.dumps(state)


def is_file(state):
    return state is not None and state.get("t") == "f"


def parent(path):
    return path.rsplit("/", 1)[0] if "/" in path else ""


# ---------------------------------------------------------------- journal


class Journal:
    """The journal file: JSON lines, each appended and fsync'd."""

    def __init__(self, path):
        self.path = path
        self.fd = None

    def load(self):
        """(model, pending intent or None, facts) from the journal on disk."""
        model, pending = {}, None
        facts = {"acked": 0, "runs": 0, "max_seq": 0, "observed": 0}
        if not os.path.exists(self.path):
            return model, pending, facts
        with open(self.path, "rb") as f:
            raw = f.read()
        lines = raw.split(b"\n")
        if lines and lines[-1] != b"":
            print("crash_workload: ignoring a torn last journal line", file=sys.stderr)
        for n, line in enumerate(lines[:-1], 1):
            try:
                rec = json.loads(line)
            except ValueError:
                raise SystemExit("crash_workload: %s:%d: not JSON" % (self.path, n))
            k = rec["k"]
            if k == "start":
                facts["runs"] += 1
            elif k == "intent":
                if pending is not None:
                    raise SystemExit("crash_workload: %s:%d: intent %d while %d is unresolved"
                                     % (self.path, n, rec["seq"], pending["seq"]))
                pending = rec
                facts["max_seq"] = max(facts["max_seq"], rec["seq"])
            elif k in ("done", "observed", "adopt"):
                model.update(rec["state"])
                if k == "done":
                    facts["acked"] += 1
                elif k == "observed":
                    facts["observed"] += 1
                if pending is not None and (k == "adopt" or rec.get("seq") == pending["seq"]):
                    pending = None
            else:
                raise SystemExit("crash_workload: %s:%d: unknown record %r" % (self.path, n, k))
        return model, pending, facts

    def history(self, path, n=8):
        """The last n operations whose intent names path (for reports)."""
        out = []
        with open(self.path, "rb") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec["k"] == "intent" and (path in rec["args"] or any(path in oc for oc in rec["outcomes"])):
                    out.append("op %d %s %s" % (rec["seq"], rec["op"], json.dumps(rec["args"])))
        return out[-n:]

    def append(self, rec):
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        line = json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"
        os.write(self.fd, line.encode())
        os.fsync(self.fd)


class Store:
    """Contents by sha256, outside the mount (no fsync: only the mount crashes)."""

    def __init__(self, path):
        self.path = path
        os.makedirs(path, exist_ok=True)

    def put(self, data):
        h = sha(data)
        p = os.path.join(self.path, h)
        if not os.path.exists(p):
            with open(p + ".tmp", "wb") as f:
                f.write(data)
            os.rename(p + ".tmp", p)
        return h

    def get(self, h):
        if h == EMPTY["sha"]:
            return b""
        try:
            with open(os.path.join(self.path, h), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def gc(self, keep):
        for name in os.listdir(self.path):
            if name not in keep:
                os.unlink(os.path.join(self.path, name))


# ---------------------------------------------------------------- looking at the mount


def observe(root, rel):
    """The state of root/rel as the mount shows it (reads files whole)."""
    p = os.path.join(root, rel) if rel else root
    try:
        st = os.lstat(p)
        if stat.S_ISDIR(st.st_mode):
            return DIR
        if not stat.S_ISREG(st.st_mode):
            return {"t": "other", "mode": oct(st.st_mode)}
        h, n = hashlib.sha256(), 0
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
                n += len(b)
        state = {"t": "f", "size": n, "sha": h.hexdigest()}
        if st.st_size != n:
            state["stat_size"] = st.st_size
        return state
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        if e.errno in MOUNT_GONE:
            raise MountGone(str(e))
        return {"t": "error", "errno": errno.errorcode.get(e.errno, str(e.errno))}


def walk(root):
    """Every path under root (relative), and problems listing it."""
    found, problems = set(), []

    def onerror(e):
        if e.errno in MOUNT_GONE:
            raise MountGone(str(e))
        problems.append("cannot list %s: %s" % (e.filename, e.strerror))

    for d, dirs, files in os.walk(root, onerror=onerror):
        rel = os.path.relpath(d, root)
        rel = "" if rel == "." else rel + "/"
        for name in dirs + files:
            found.add(rel + name)
    return found, problems


def combos_of(model, pending):
    """The allowed joint states of the paths the pending operation touches:
    the state before it first, then each of its outcomes."""
    affected = sorted({p for oc in pending["outcomes"] for p in oc})
    pre = {p: model.get(p) for p in affected}
    combos = [pre] + [{p: oc.get(p, pre[p]) for p in affected} for oc in pending["outcomes"]]
    return affected, combos


def describe_file(root, rel, want, got, store):
    """Where a file differs from its acknowledged content."""
    if not (is_file(want) and is_file(got)) or store is None:
        return ""
    expected = store.get(want["sha"])
    if expected is None:
        return ""
    try:
        with open(os.path.join(root, rel), "rb") as f:
            actual = f.read()
    except OSError:
        return ""
    n = min(len(expected), len(actual))
    off = next((i for i in range(0, n, 4096) if expected[i:i + 4096] != actual[i:i + 4096]), None)
    if off is not None:
        off = next(i for i in range(off, min(off + 4096, n)) if expected[i] != actual[i])
    elif len(expected) != len(actual):
        off = n
    else:
        return ""

    def tag_near(data):
        m = None
        for m in TAG.finditer(data, max(0, off - 4096), min(len(data), off + 64)):
            pass
        return "op %d +%d" % (int(m.group(1)), int(m.group(2))) if m else "no tag"

    return "; first difference at offset %d (expected: %s, found: %s, zero bytes there: %s)" % (
        off, tag_near(expected), tag_near(actual), actual[off:off + 16] == bytes(len(actual[off:off + 16])))


def check(root, model, pending, store):
    """Compares the mount with the journal. Returns (problems, report)."""
    problems = []
    actual, walk_problems = walk(root)
    problems += walk_problems
    affected, combos = combos_of(model, pending) if pending else ([], [])
    paths = set(model) | actual | set(affected)
    obs = {p: observe(root, p) for p in sorted(paths)}
    report = {"paths": 0, "files": 0, "dirs": 0, "bytes": 0, "inflight": "none"}

    def count(state):
        if is_file(state):
            report["files"] += 1
            report["bytes"] += state["size"]
        elif state == DIR:
            report["dirs"] += 1
        if state is not None:
            report["paths"] += 1

    for p in sorted(paths - set(affected)):
        want, got = model.get(p), obs[p]
        if want == got:
            count(want)
        elif p not in model:
            problems.append("%s: not in the journal, found %s" % (p, show(got)))
        else:
            problems.append("%s: acknowledged %s, found %s%s" % (
                p, show(want), show(got), describe_file(root, p, want, got, store)))
    if pending:
        got = {p: obs[p] for p in affected}
        match = [i for i, c in enumerate(combos) if c == got]
        if match:
            for p in affected:
                count(got[p])
            labels = pending.get("labels") or ["outcome %d" % i for i in range(1, len(combos))]
            report["inflight"] = "op %d %s %s" % (pending["seq"], pending["op"],
                                                  "not-applied" if match[0] == 0 else labels[match[0] - 1])
        else:
            for p in affected:
                allowed = " | ".join(sorted({show(c[p]) for c in combos}))
                mark = "" if any(c[p] == got[p] for c in combos) else " <- not allowed"
                problems.append("%s: in-flight op %d %s allows {%s}, found %s%s" % (
                    p, pending["seq"], pending["op"], allowed, show(got[p]), mark))
            problems.append("in-flight op %d %s: the paths match no single allowed outcome (%d allowed)"
                            % (pending["seq"], pending["op"], len(combos)))
    return problems, report, obs


# ---------------------------------------------------------------- the workload


def write_all(fd, data, offset=None):
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        if offset is not None:
            offset += n
        view = view[n:]


def with_fd(path, flags, body):
    """Opens path, runs body(fd), closes it; a close error counts (it is part
    of the acknowledgement), but does not hide an earlier one."""
    fd = os.open(path, flags, 0o644)
    try:
        body(fd)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise
    os.close(fd)


class Op:
    """An operation: its outcomes (with a label each, for reports), the state
    once acknowledged, the syscalls, the new contents it writes."""

    def __init__(self, name, args, outcomes, done, action, contents=(), labels=("applied",)):
        self.name, self.args, self.outcomes, self.done = name, args, outcomes, done
        self.action, self.contents, self.labels = action, contents, list(labels)


class Workload:
    def __init__(self, args, journal, store, model, facts):
        self.root = args.dir
        self.journal, self.store, self.model = journal, store, model
        self.seq = facts["max_seq"]
        self.rng = random.Random("%s:%d" % (args.seed, facts["runs"]))
        self.slow = args.slow
        self.resolve_timeout = args.resolve_timeout
        self.events = open(args.events, "a") if args.events else None
        self.max_total = args.max_total_mib << 20
        self.acked = self.failed = self.slowed = 0
        self.max_block = 0.0

    # -- helpers on the model
    def path(self, rel):
        return os.path.join(self.root, rel)

    def files(self):
        return sorted(p for p, s in self.model.items() if is_file(s))

    def dirs_for_files(self):
        return [""] + [d for d in FIXED_DIRS + TRANSIENT_DIRS if self.model.get(d) == DIR]

    def children(self, d):
        return sorted(p for p in self.model if p.startswith(d + "/"))

    def empty_dir(self, d):
        return all(self.model[p] is None for p in self.children(d))

    def content(self, rel):
        want = self.model[rel]["sha"]
        data = self.store.get(want)
        if data is None:  # a state taken over by verify --adopt: what the mount has
            try:
                with open(self.path(rel), "rb") as f:
                    data = f.read()
            except OSError as e:
                if e.errno in MOUNT_GONE:
                    raise MountGone(str(e))
                raise
            if sha(data) == want:
                self.store.put(data)
            else:
                data = None
        if data is None:
            raise SystemExit("crash_workload: content of %s (sha %s) missing from %s"
                             % (rel, self.model[rel]["sha"], self.store.path))
        return data

    def total_bytes(self):
        return sum(s["size"] for s in self.model.values() if is_file(s))

    def data(self, seq, lo, hi):
        n = self.rng.randint(lo, hi)
        kind = self.rng.random()
        if kind < 0.08:
            return bytes(n)  # zeros: sparse-looking blocks
        buf = bytearray(self.rng.randbytes(n))
        for off in range(0, n - 21, 4096):
            buf[off:off + 21] = b"<%08d:%010d>" % (seq % 10**8, off)
        return bytes(buf)

    def size_class(self, seq):
        r = self.rng.random()
        if r < 0.5:
            return self.data(seq, 0, 4096)
        if r < 0.88:
            return self.data(seq, 4097, 200 << 10)
        return self.data(seq, 200 << 10, 1536 << 10)

    # -- operations
    def op_create(self, seq):
        free = [d + "/" + n if d else n for d in self.dirs_for_files() for n in FILE_NAMES]
        free = [p for p in free if self.model.get(p) is None]
        if not free:
            return None
        p = self.rng.choice(free)
        data = self.data(seq, 0, 8192)
        new = fstate(data)

        def act():
            with_fd(self.path(p), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                    lambda fd: (write_all(fd, data), os.fsync(fd)))
        return Op("create", [p, len(data)], [{p: EMPTY}, {p: new}], {p: new}, act, [data],
                  ["created-empty", "written"])

    def op_whole(self, seq):
        dirs = self.dirs_for_files()
        d = self.rng.choice(dirs)
        p = (d + "/" if d else "") + self.rng.choice(FILE_NAMES)
        data = self.size_class(seq)
        new = fstate(data)

        def act():
            with_fd(self.path(p), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, lambda fd: write_all(fd, data))
        return Op("write-close", [p, len(data)], [{p: EMPTY}, {p: new}], {p: new}, act, [data],
                  ["truncated-or-created-empty", "written"])

    def op_append(self, seq):
        files = self.files()
        if not files:
            return None
        p = self.rng.choice(files)
        add = self.size_class(seq)
        data = self.content(p) + add
        new = fstate(data)

        def act():
            with_fd(self.path(p), os.O_WRONLY | os.O_APPEND, lambda fd: (write_all(fd, add), os.fsync(fd)))
        return Op("append-fsync", [p, len(add)], [{p: new}], {p: new}, act, [data])

    def op_overwrite(self, seq):
        files = self.files()
        if not files:
            return None
        p = self.rng.choice(files)
        old = self.content(p)
        patch = self.size_class(seq) if self.rng.random() < 0.3 else self.data(seq, 1, 70000)
        if self.rng.random() < 0.15:
            off = len(old) + self.rng.randint(0, 200 << 10)  # past the end: a hole
        else:
            off = self.rng.randint(0, len(old))
        # A write of no bytes changes nothing, past the end included (no
        # hole: the length stays).
        data = old[:off] + bytes(max(0, off - len(old))) + patch + old[off + len(patch):] if patch else old
        new = fstate(data)

        def act():
            with_fd(self.path(p), os.O_WRONLY, lambda fd: (os.pwrite(fd, patch, off) if not patch else write_all(fd, patch, off),
                                                           os.fsync(fd)))
        return Op("overwrite-fsync", [p, off, len(patch)], [{p: new}], {p: new}, act, [data])

    def op_truncate(self, seq):
        files = self.files()
        if not files:
            return None
        p = self.rng.choice(files)
        old = self.content(p)
        r = self.rng.random()
        if r < 0.15:
            size = 0
        elif r < 0.7 and old:
            size = self.rng.randint(0, len(old))
        else:
            size = len(old) + self.rng.randint(1, 300 << 10)
        data = old[:size] + bytes(max(0, size - len(old)))
        new = fstate(data)

        def act():
            with_fd(self.path(p), os.O_WRONLY, lambda fd: (os.ftruncate(fd, size), os.fsync(fd)))
        return Op("truncate-fsync", [p, size], [{p: new}], {p: new}, act, [data])

    def op_rename(self, seq):
        files = self.files()
        if not files:
            return None
        src = self.rng.choice(files)
        targets = [(d + "/" if d else "") + n for d in self.dirs_for_files() for n in FILE_NAMES]
        existing = [t for t in targets if is_file(self.model.get(t)) and t != src]
        if existing and self.rng.random() < 0.35:
            dst = self.rng.choice(existing)  # replaces a file
        else:
            dst = self.rng.choice([t for t in targets if t != src])
        outcome = {src: None, dst: self.model[src]}

        def act():
            os.rename(self.path(src), self.path(dst))
        return Op("rename", [src, dst], [outcome], outcome, act)

    def op_unlink(self, seq):
        files = self.files()
        if not files:
            return None
        p = self.rng.choice(files)

        def act():
            os.unlink(self.path(p))
        return Op("unlink", [p], [{p: None}], {p: None}, act)

    def op_mkdir(self, seq):
        free = [d for d in TRANSIENT_DIRS if self.model.get(d) is None]
        if not free:
            return None
        d = self.rng.choice(free)

        def act():
            os.mkdir(self.path(d))
        return Op("mkdir", [d], [{d: DIR}], {d: DIR}, act)

    def op_rmdir(self, seq):
        empty = [d for d in TRANSIENT_DIRS if self.model.get(d) == DIR and self.empty_dir(d)]
        if not empty:
            return None
        d = self.rng.choice(empty)

        def act():
            os.rmdir(self.path(d))
        return Op("rmdir", [d], [{d: None}], {d: None}, act)

    def op_rename_dir(self, seq):
        have = [d for d in TRANSIENT_DIRS if self.model.get(d) == DIR]
        if not have:
            return None
        src = self.rng.choice(have)
        # to a free name, or over an empty transient directory
        targets = [d for d in TRANSIENT_DIRS if d != src and (self.model.get(d) is None or self.empty_dir(d))]
        if not targets:
            return None
        dst = self.rng.choice(targets)
        outcome = {src: None, dst: DIR}
        for p in self.children(dst):
            outcome[p] = None
        for p in self.children(src):
            outcome[p] = None
        for p in self.children(src):
            outcome[dst + p[len(src):]] = self.model[p]

        def act():
            os.rename(self.path(src), self.path(dst))
        return Op("rename-dir", [src, dst], [outcome], outcome, act)

    def choose(self, seq):
        weights = [("whole", 18), ("append", 15), ("overwrite", 15), ("truncate", 8), ("rename", 16),
                   ("unlink", 7), ("create", 8), ("mkdir", 4), ("rmdir", 4), ("rename_dir", 3)]
        if self.total_bytes() > self.max_total:
            weights = [("unlink", 5), ("truncate", 3), ("rename", 2)]
        for _ in range(50):
            name = self.rng.choices([w[0] for w in weights], [w[1] for w in weights])[0]
            op = getattr(self, "op_" + name)(seq)
            if op is not None:
                return op
        return self.op_whole(seq)

    # -- running one operation
    def event(self, **kv):
        if self.events:
            kv["time"] = round(time.time(), 3)
            self.events.write(json.dumps(kv, sort_keys=True) + "\n")
            self.events.flush()

    def perform(self, op):
        self.seq += 1
        seq = self.seq
        for data in op.contents:
            self.store.put(data)
        self.journal.append({"k": "intent", "seq": seq, "op": op.name, "args": op.args,
                             "outcomes": op.outcomes, "labels": op.labels, "time": round(time.time(), 3)})
        t0 = time.monotonic()
        try:
            op.action()
        except OSError as e:
            if e.errno in MOUNT_GONE:
                raise MountGone("op %d %s: %s" % (seq, op.name, e))
            dt = time.monotonic() - t0
            self.failed += 1
            self.max_block = max(self.max_block, dt)
            name = errno.errorcode.get(e.errno, str(e.errno))
            print("crash_workload: op %d %s %s failed after %.2f s: %s" % (seq, op.name, op.args, dt, e),
                  file=sys.stderr)
            t1 = time.monotonic()
            ok = self.resolve({"seq": seq, "op": op.name, "outcomes": op.outcomes})
            self.event(kind="failed", seq=seq, op=op.name, errno=name, dur=round(dt, 3),
                       resolve_s=round(time.monotonic() - t1, 3))
            return ok
        dt = time.monotonic() - t0
        self.max_block = max(self.max_block, dt)
        if dt >= self.slow:
            self.slowed += 1
            self.event(kind="slow", seq=seq, op=op.name, dur=round(dt, 3))
        self.journal.append({"k": "done", "seq": seq, "state": op.done, "time": round(time.time(), 3)})
        self.model.update(op.done)
        self.acked += 1
        return True

    def resolve(self, pending):
        """Looks at the paths of an operation whose outcome is unknown (failed,
        or in flight at a crash) and journals what is there, if allowed."""
        affected, combos = combos_of(self.model, pending)
        deadline = time.monotonic() + self.resolve_timeout
        while True:
            got = {p: observe(self.root, p) for p in affected}
            errors = [p for p in affected if got[p] is not None and got[p].get("t") == "error"]
            if not errors or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if got in combos:
            self.journal.append({"k": "observed", "seq": pending["seq"], "state": got, "time": round(time.time(), 3)})
            self.model.update(got)
            return True
        for p in affected:
            allowed = " | ".join(sorted({show(c[p]) for c in combos}))
            print("PROBLEM: %s: op %d %s allows {%s}, found %s" % (p, pending["seq"], pending["op"], allowed,
                                                                  show(got[p])), file=sys.stderr)
        print("PROBLEM: op %d %s left a state that is neither before nor after it" % (pending["seq"], pending["op"]),
              file=sys.stderr)
        return False

    def setup_ops(self):
        for d in FIXED_DIRS:
            if self.model.get(d) != DIR:
                def act(d=d):
                    os.mkdir(self.path(d))
                yield Op("mkdir", [d], [{d: DIR}], {d: DIR}, act)


def cmd_run(args):
    journal = Journal(args.journal)
    model, pending, facts = journal.load()
    store = Store(args.journal + ".store")
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    w = Workload(args, journal, store, model, facts)
    code = EXIT_OK
    why = "done"
    try:
        try:
            os.mkdir(args.dir)
        except FileExistsError:
            pass
        except OSError as e:
            if e.errno in MOUNT_GONE:
                raise MountGone(str(e))
            raise
        if pending is not None and not w.resolve(pending):
            return EXIT_PROBLEM
        journal.append({"k": "start", "seed": args.seed, "run": facts["runs"], "time": round(time.time(), 3)})
        store.gc({s["sha"] for s in model.values() if is_file(s)})
        if args.ready:
            open(args.ready, "w").close()
        deadline = time.monotonic() + args.duration
        n = 0
        setup = list(w.setup_ops())
        while not stop and n < args.ops and time.monotonic() < deadline:
            op = setup.pop(0) if setup else w.choose(w.seq + 1)
            if not w.perform(op):
                code, why = EXIT_PROBLEM, "problem"
                break
            n += 1
            if n % 200 == 0:  # forget contents no path has any more
                store.gc({s["sha"] for s in model.values() if is_file(s)})
        if stop:
            why = "signal"
    except MountGone as e:
        code, why = EXIT_MOUNT_GONE, "mount gone (%s)" % e
    print("crash_workload run: seed=%s run=%d acked=%d failed=%d slow=%d max_op_s=%.2f end=%s"
          % (args.seed, facts["runs"], w.acked, w.failed, w.slowed, w.max_block, why), flush=True)
    return code


def cmd_verify(args):
    journal = Journal(args.journal)
    model, pending, facts = journal.load()
    store = Store(args.journal + ".store")
    if not os.path.isdir(args.dir):
        if not model:
            print("crash_workload verify: nothing acknowledged yet, %s absent" % args.dir)
            return EXIT_OK
        print("PROBLEM: %s is missing" % args.dir)
        return EXIT_PROBLEM
    try:
        problems, report, obs = check(args.dir, model, pending, store)
    except MountGone as e:
        print("crash_workload verify: the mount is gone: %s" % e)
        return EXIT_MOUNT_GONE
    for p in problems:
        print("PROBLEM: " + p)
    # What the journal did last to each path named in a problem.
    for path in sorted({p.split(":", 1)[0] for p in problems if ":" in p and not p.startswith("in-flight")}):
        past = journal.history(path)
        if past:
            print("history of %s: %s" % (path, "; ".join(past)))
    print("crash_workload verify: paths=%d files=%d dirs=%d bytes_verified=%d acked_ops=%d observed=%d "
          "inflight=%s problems=%d" % (report["paths"], report["files"], report["dirs"], report["bytes"],
                                       facts["acked"], facts["observed"], report["inflight"].replace(" ", "_"),
                                       len(problems)), flush=True)
    if problems and args.adopt:
        state = {p: s for p, s in obs.items() if model.get(p) != s}
        journal.append({"k": "adopt", "state": state, "time": round(time.time(), 3)})
    return EXIT_PROBLEM if problems else EXIT_OK


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the workload")
    v = sub.add_parser("verify", help="check the mount against the journal")
    for p in (r, v):
        p.add_argument("--dir", required=True, help="working directory inside the mount")
        p.add_argument("--journal", required=True, help="journal file outside the mount")
    r.add_argument("--seed", default="1")
    r.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    r.add_argument("--ops", type=int, default=10**9, help="stop after this many operations")
    r.add_argument("--ready", help="create this file when the operations begin (after resolving)")
    r.add_argument("--events", help="append failed and slow operations here (JSON lines)")
    r.add_argument("--slow", type=float, default=1.0, help="an operation this slow (s) is an event")
    r.add_argument("--resolve-timeout", type=float, default=300.0,
                   help="seconds to keep looking at a failed operation's paths while they read as errors")
    r.add_argument("--max-total-mib", type=int, default=48, help="shrink the tree beyond this many MiB")
    v.add_argument("--adopt", action="store_true",
                   help="after reporting problems, journal what is there so a next run can go on")
    args = ap.parse_args()
    args.dir = os.path.abspath(args.dir)
    return cmd_run(args) if args.cmd == "run" else cmd_verify(args)


if __name__ == "__main__":
    sys.exit(main())
