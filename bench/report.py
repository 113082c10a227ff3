#!/usr/bin/env python3
"""Turn the raw results of bench/run_all.sh into a markdown report.

usage: report.py RESULTS_DIR > report.md

RESULTS_DIR holds run.env (KEY=VALUE lines), fio/<job>.<target>.json with
fio/<job>.<target>.info (rc, daemon CPU seconds, wall seconds, load), and
md/<variant>.<target>.txt (mdbench output). With --rounds N the same files
are named <job>.<target>.r<k>.json etc. for k = 1..N; every figure is then the
median over the rounds, and a ratio cell also shows the range of the ratios
of the rounds (round k of one target against round k of the other).
"""
import glob
import json
import math
import os
import re
import statistics
import sys

TARGETS = ["local", "passthrough", "passthrough-hp", "tessera", "tessera-wb"]
LABEL = {"local": "local dir", "passthrough": "passthrough_ll", "passthrough-hp": "passthrough_hp", "tessera": "Tessera",
         "tessera-wb": "Tessera --writeback"}

# fio jobs in report order: name -> (description, metric)
FIO_ROWS = [
    ("seqread-pass1", "seq read 1 MiB, direct, 1 job, first pass", "MiB/s"),
    ("seqread-1j", "seq read 1 MiB, direct, 1 job", "MiB/s"),
    ("seqread-2j", "seq read 1 MiB, direct, 2 jobs, one file", "MiB/s"),
    ("randread-qd1", "rand read 4 KiB, libaio direct, iodepth 1", "IOPS"),
    ("randread-qd8", "rand read 4 KiB, libaio direct, iodepth 8", "IOPS"),
    ("randread-qd32", "rand read 4 KiB, libaio direct, iodepth 32", "IOPS"),
    ("seqwrite-1j", "seq write 1 MiB, direct, 1 job (+fsync)", "MiB/s"),
    ("seqwrite-2j", "seq write 1 MiB, direct, 2 jobs, own files (+fsync)", "MiB/s"),
    ("randwrite-1j", "rand write 4 KiB, libaio direct, qd 1, 1 job (+fsync)", "IOPS"),
    ("randwrite-2j", "rand write 4 KiB, libaio direct, qd 1, 2 jobs, own files (+fsync)", "IOPS"),
]

def fio_category(job):
    if job == "seqread-pass1":
        return None
    return {"seqread": "sequential read 1 MiB", "randread": "random read 4 KiB",
            "seqwrite": "sequential write 1 MiB", "randwrite": "random write 4 KiB"}[job.split("-")[0]]


def md_category(phase):
    if phase in ("dir_stat", "file_stat"):
        return "metadata: stat"
    if phase == "file_read":
        return "metadata: small-file open+read+close"
    return "metadata: create / remove"


CATEGORIES = ["sequential read 1 MiB", "random read 4 KiB", "sequential write 1 MiB",
              "random write 4 KiB", "metadata: create / remove", "metadata: stat",
              "metadata: small-file open+read+close"]

MD_PHASES = [
    ("dir_create", "Directory creation"),
    ("dir_stat", "Directory stat"),
    ("dir_remove", "Directory removal"),
    ("file_create", "File creation"),
    ("file_stat", "File stat"),
    ("file_read", "File read"),
    ("file_remove", "File removal"),
    ("tree_create", "Tree creation"),
    ("tree_remove", "Tree removal"),
]

# Published figures (/work/shared/reference), for context only: other machines,
# networks and metadata engines.
JUICEFS_MDTEST = {  # mdtest -b 6 -I 8 -z 4, 1 task, c5.large client, Redis + S3
    "dir_create": 1416.6, "dir_stat": 3810.1, "dir_remove": 1115.1,
    "file_create": 1410.3, "file_stat": 5023.2, "file_read": 3487.9,
    "file_remove": 1163.4, "tree_create": 1503.0, "tree_remove": 1119.8,
}
CUBEFS_1P = {"dir_create": 770, "dir_remove": 854, "file_create": 706,
             "file_remove": 1220, "tree_create": 734, "tree_remove": 553}
CUBEFS_4P = {"dir_create": 3630, "dir_remove": 4012, "file_create": 3306,
             "file_remove": 4606, "tree_create": 379, "tree_remove": 83}


def read_env(path):
    env = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v
    return env


def read_info(path):
    info = {}
    if os.path.exists(path):
        for word in open(path).read().split():
            if "=" in word:
                k, v = word.split("=", 1)
                info[k] = v
    return info


def round_paths(res, sub, stem, ext):
    """The result files of stem (job.target or variant.target): one per round,
    in round order; [] if none."""
    plain = os.path.join(res, sub, f"{stem}.{ext}")
    if os.path.exists(plain):
        return [plain]
    found = glob.glob(os.path.join(res, sub, f"{glob.escape(stem)}.r*.{ext}"))
    rounds = {}
    for f in found:
        m = re.fullmatch(r"r(\d+)", os.path.basename(f)[len(stem) + 1:-len(ext) - 1])
        if m:
            rounds[int(m.group(1))] = f
    return [rounds[k] for k in sorted(rounds)]


class Figures(dict):
    """Median figures over rounds; .rounds maps a figure's key to its value
    in each round (None where that round failed)."""
    rounds = None


def median_of(rounds):
    """Figures holding the median of each key over the rounds that succeeded
    (None if none did), the per-round values kept in .rounds."""
    ok = [r for r in rounds if r is not None]
    if not ok:
        return None
    out = Figures()
    for k in ok[0]:
        vals = [r[k] for r in ok if isinstance(r.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else ok[0][k]
    out.rounds = {k: [r.get(k) if r is not None else None for r in rounds] for k in ok[0]}
    return out


def load_fio(res, job, target):
    """Median summary of a fio job's rounds on a target, or None if every
    round is missing or failed."""
    paths = round_paths(res, "fio", f"{job}.{target}", "json")
    return median_of([load_fio_file(p) for p in paths])


def load_fio_file(path):
    """Summary of one fio run, or None if it failed."""
    info = read_info(path[:-len(".json")] + ".info")
    try:
        text = open(path).read()
        data = json.loads(text[text.index("{"):])   # fio may print notes before the JSON
    except (OSError, ValueError):
        return None
    if info.get("rc", "0") != "0" or not data.get("jobs"):
        return None
    j = data["jobs"][0]                      # group_reporting=1: one aggregate
    if j.get("error"):
        return None
    d = j["read"] if j["read"]["io_bytes"] > 0 else j["write"]
    pct = d["clat_ns"].get("percentile", {})
    wall = float(info.get("wall_s", 0) or 0)
    cpu = float(info.get("daemon_cpu_s", 0) or 0)
    return {
        "MiB/s": d["bw_bytes"] / 2**20,
        "IOPS": d["iops"],
        "lat_us": d["lat_ns"]["mean"] / 1e3,
        "p99_us": pct.get("99.000000", 0) / 1e3,
        "max_ms": d["clat_ns"]["max"] / 1e6,
        "runtime_s": d["runtime"] / 1e3,
        "wall_s": wall,
        "cores": cpu / wall if wall > 0 else None,
        "load": info.get("loadavg", "?"),
    }


def load_md(res, variant, target):
    """(config, median ops/s per phase) over the rounds of an mdbench run on a
    target; rates None if every round failed."""
    config, rounds = None, []
    for path in round_paths(res, "md", f"{variant}.{target}", "txt"):
        c, rates = load_md_file(path)
        config = config or c
        rounds.append(rates)
    return config, median_of(rounds)


def load_md_file(path):
    config, rates = None, {}
    for line in open(path):
        fields = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
        if line.startswith("config "):
            config = fields
        elif line.startswith("result "):
            rates[fields["phase"]] = float(fields["ops_per_sec"])
    if config is None or config.get("errors", "0") != "0":
        return config, None
    return config, rates


def fmt(x, digits=None):
    if x is None:
        return "—"
    if digits is None:
        digits = 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2
    return f"{x:,.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


def round_ratios(a, b, key):
    """Ratios a/b of the rounds both succeeded in (round k against round k)."""
    ra = getattr(a, "rounds", None) or {}
    rb = getattr(b, "rounds", None) or {}
    return [x / y for x, y in zip(ra.get(key, []), rb.get(key, [])) if x is not None and y]


def fmt_ratio_rounds(r, a, b, key):
    """A ratio cell: the ratio of the medians, and with several rounds the
    range of the per-round ratios."""
    rs = round_ratios(a, b, key)
    if r is None or len(rs) < 2:
        return fmt_ratio(r)
    return f"{r:.2f}× ({min(rs):.2f}–{max(rs):.2f})"


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    res = sys.argv[1]
    env = read_env(os.path.join(res, "run.env"))
    targets = env.get("targets", " ".join(TARGETS)).split()
    quick = env.get("quick") == "1"
    out = []
    p = out.append

    p("# Tessera benchmark: " + " vs ".join(LABEL[t] for t in targets if t in LABEL))
    p("")
    rounds = int(env.get("rounds", "1") or 1)
    flags = (" --quick" if quick else "") + (f" --rounds {rounds}" if rounds > 1 else "")
    p(f"Generated by `bench/run_all.sh{flags}` on {env.get('date', '?')}. "
      "Ratios are Tessera ÷ other target; above 1× means Tessera is faster (higher is better "
      "for every figure in the ratio columns).")
    if quick:
        p("")
        p("**Quick (smoke) run: tiny sizes and 1-second jobs; the figures only show that "
          "everything works, not how fast it is.**")
    p("")
    p("## Machine")
    p("")
    p("| | |")
    p("|---|---|")
    for key, label in [("nproc", "CPUs (nproc)"), ("cpu_model", "CPU model"), ("hypervisor", "hypervisor"),
                       ("mem_total", "memory"), ("kernel", "kernel"), ("os", "OS"), ("date", "date"),
                       ("workdir_fs", "file system under all targets"), ("fio", "fio"),
                       ("libfuse", "libfuse (of the passthrough examples)"), ("gcc", "compiler"),
                       ("tessera_binary", "Tessera binary"), ("tessera_head", "repository HEAD"),
                       ("tessera_dirty_files", "uncommitted files in the tree"),
                       ("loadavg_start", "load average at start"), ("loadavg_end", "load average at end"),
                       ("mem_available_start", "memory available at start"),
                       ("workdir_fs_used_start", "used on that file system at start"),
                       ("elapsed_s", "suite wall time, s")]:
        if env.get(key, "") != "":
            p(f"| {label} | {env[key]} |")
    p("")
    if env.get("low_memory_warning") == "1":
        p("**Less than 60% of the memory was available at the start: the write jobs of every target "
          "slow down when memory is short (Tessera's more), so their figures are low.**")
        p("")
    p("The machine is shared with builds and tests of other engineers, so every figure is noisy "
      "(the load average column in the raw data shows how busy it was); differences under ~20% "
      "are not meaningful. Each fio job runs on every target back to back before the next "
      "job starts, so slow changes in background load affect the targets alike.")
    p("")
    p("## Setup")
    p("")
    if "local" in targets:
        p("- **local dir**: a directory on the file system above.")
    pristine = env.get("pristine_passthrough") == "1"
    if "passthrough" in targets:
        p("- **passthrough_ll**: libfuse's low-level passthrough example, compiled at bench time "
          "(`gcc -O2`), mounted with `-o source=DIR` and its defaults: multi-threaded, `cache=auto` "
          "(1 s entry/attr timeout, page cache dropped on open), no writeback cache. "
          + ("Compiled unchanged (`--pristine-passthrough`): its O_DIRECT writes fail with EINVAL."
             if pristine else
             "One change: O_DIRECT is dropped from the daemon's own `open()`/`openat()` of the "
             "underlying file (two flag masks, patched by `sed` at bench time). Unpatched, every "
             "O_DIRECT write fails with EINVAL because libfuse's request buffer is not aligned for "
             "O_DIRECT; fuse-overlayfs made the same change (PR #168). The kernel still sends O_DIRECT "
             "I/O to the daemon uncached."))
    if "passthrough-hp" in targets:
        p("- **passthrough_hp**: libfuse's high-performance passthrough example (C++), taken from "
          "Debian's fuse3 source package of the installed libfuse and compiled unchanged (`g++ -O2`), "
          "mounted with its defaults: 1-day entry/attr timeouts, writeback cache, splice, "
          "`default_permissions`. Its own opens keep O_DIRECT.")
    p("- **Tessera**: `tessera format sqlite3://…/meta.db benchvol --bucket DIR "
      f"{env.get('format_opts', '')}` (SQLite metadata, local-directory bucket, 4 MiB blocks unless "
      f"changed) and `tessera mount … -d {env.get('mount_opts', '')}`: its defaults — coherent "
      "kernel caches (entries and attributes kept 300 s while the engine reports other clients' "
      "changes, docs/consistency.md), no writeback cache.")
    if "tessera-wb" in targets:
        p("- **Tessera --writeback** (write jobs only): a second such volume mounted with `--writeback "
          f"--cache-dir DIR --cache-size 0 {env.get('wb_opts', '')}` (DIR on the same file system, no read "
          "cache): a commit stages its blocks in an append-only pack on the cache disk, fdatasyncs it and "
          "commits the slices; blocks are uploaded to the bucket in the background.")
    p(f"- fio: data file {env.get('size', '?')} (written once, then read by all read jobs), "
      f"time-based jobs {env.get('runtime', '?')} s, seq-write jobs write {env.get('size', '?')} each, "
      f"rand-write jobs use a {env.get('rw_size', '?')} file each; job files in `bench/fio/`.")
    p("")

    head, out = out, []          # the headline goes between the setup and the tables
    p = out.append
    # Ratio columns: (numerator target, denominator target, label).
    extra = []
    if "tessera" in targets and "passthrough-hp" in targets:
        extra.append(("tessera", "passthrough-hp", "Tessera / passthrough_hp"))
    if "tessera" in targets and "passthrough" in targets:
        extra.append(("tessera", "passthrough", "Tessera / passthrough_ll"))
    if "tessera" in targets and "local" in targets:
        extra.append(("tessera", "local", "Tessera / local"))
    if "tessera-wb" in targets and "passthrough-hp" in targets:
        extra.append(("tessera-wb", "passthrough-hp", "Tessera --writeback / passthrough_hp"))
    if "tessera-wb" in targets and "passthrough" in targets:
        extra.append(("tessera-wb", "passthrough", "Tessera --writeback / passthrough_ll"))
    cat_ratios = {c: {(num, base): [] for num, base, _ in extra} for c in CATEGORIES}

    # ------------------------------------------------------------------ fio
    fio = {(job, t): load_fio(res, job, t) for job, _, _ in FIO_ROWS for t in targets}
    have_fio = bool(glob.glob(os.path.join(res, "fio", "*.json")))
    if have_fio:
        fio_section(p, fio, targets, extra, cat_ratios)
    have_md = bool(glob.glob(os.path.join(res, "md", "*.txt")))
    if have_md:
        # tessera-wb runs the write jobs only.
        md_section(p, res, env, [t for t in targets if t != "tessera-wb"],
                   [e for e in extra if e[0] != "tessera-wb"], cat_ratios)
    body, out = out, head
    p = out.append

    # ------------------------------------------------------------ headline
    if extra:
        p("## Headline: Tessera as a multiple of the others (geometric means)")
        p("")
        p("Higher is better; 1× = as fast. Each category averages the rows of the tables below.")
        p("")
        ref_base = "passthrough-hp" if "passthrough-hp" in targets else "passthrough"
        p("| category | " + " | ".join(label for _, _, label in extra)
          + f" | rows | range vs {LABEL[ref_base]} |")
        p("|---|" + "---:|" * len(extra) + "---:|---|")
        for c in CATEGORIES:
            xs = cat_ratios[c]
            if not any(xs.values()):
                continue
            cells = [fmt_ratio(geomean(xs[num, base])) for num, base, _ in extra]
            ref = xs.get(("tessera", ref_base)) or xs.get(("tessera", "local")) or []
            rng = f"{min(ref):.2f}× – {max(ref):.2f}×" if ref else "—"
            p(f"| {c} | " + " | ".join(cells) + f" | {len(ref)} | {rng} |")
        p("")
    out.extend(body)
    settle = float(env.get("md_settle", "0") or 0)
    pristine = env.get("pristine_passthrough") == "1"
    emit_notes(p, env, settle, pristine, targets)
    print("\n".join(out))


def fio_section(p, fio, targets, extra, cat_ratios):
    p("## fio")
    p("")
    hdr = "| job | unit | " + " | ".join(LABEL[t] for t in targets)
    sep = "|---|---|" + "---:|" * len(targets)
    for _, _, label in extra:
        hdr += f" | {label}"
        sep += "---:|"
    p(hdr + " |")
    p(sep)
    for job, desc, unit in FIO_ROWS:
        row = f"| {desc} | {unit} | "
        row += " | ".join(fmt(fio[job, t][unit] if fio[job, t] else None) for t in targets)
        for num, base, _ in extra:
            r = ratio(fio[job, num] and fio[job, num][unit],
                      fio[job, base] and fio[job, base][unit])
            row += f" | {fmt_ratio_rounds(r, fio[job, num], fio[job, base], unit)}"
            if r and fio_category(job):
                cat_ratios[fio_category(job)][num, base].append(r)
        p(row + " |")
    p("")
    p("Latency per job: mean completion latency / 99th percentile / maximum "
      "(µs, µs, ms), and the FUSE daemon's CPU use over the job in cores (user+system time ÷ wall time).")
    p("")
    hdr = "| job | " + " | ".join(f"{LABEL[t]} mean / p99 / max" for t in targets)
    sep = "|---|" + "---:|" * len(targets)
    fuse_targets = [t for t in targets if t != "local"]
    for t in fuse_targets:
        hdr += f" | {LABEL[t]} CPU"
        sep += "---:|"
    p(hdr + " |")
    p(sep)
    for job, desc, unit in FIO_ROWS:
        cells = []
        for t in targets:
            f = fio[job, t]
            cells.append("—" if not f else f"{fmt(f['lat_us'])} / {fmt(f['p99_us'])} / {fmt(f['max_ms'])}")
        for t in fuse_targets:
            f = fio[job, t]
            cells.append("—" if not f or f["cores"] is None else f"{f['cores']:.2f}")
        p(f"| {desc} | " + " | ".join(cells) + " |")
    p("")
    # tessera-wb runs the write jobs only.
    missing = [f"{job} on {t}" for (job, t), f in fio.items()
               if f is None and not (t == "tessera-wb" and not job.startswith(("seqwrite", "randwrite")))]
    if missing:
        p(f"Missing or failed fio runs: {', '.join(missing)} (see the fio logs).")
        p("")



def md_section(p, res, env, targets, extra, cat_ratios):
    p("## Metadata (mdbench, mdtest-shaped)")
    p("")
    p("`bench/mdbench.c` does what `mdtest` does without MPI: P forked processes, each in its own "
      "tree `DIR/p<k>` (like `mdtest -u`), phases separated by barriers, rate = all operations ÷ "
      "wall time of the phase. Directory phases create/stat/remove I directories in every tree "
      "node, file phases create (open+write+close) / stat / read (open+read+close) / remove I "
      f"files per node ({env.get('md_bytes', '?')} bytes each; mdtest's default is 0), tree phases "
      "make and remove the nodes themselves. ops/s; higher is better.")
    p("")
    settle = float(env.get("md_settle", "0") or 0)
    if settle > 0 and "passthrough" in targets:
        p(f"Before each stat and read phase mdbench pauses {settle:g} s (untimed, `-S`), longer than "
          "passthrough_ll's 1 s kernel entry/attribute timeouts, so its stat phases measure its "
          "lookups (mdtest runs the phases back to back; `--md-settle 0` does the same). Tessera's "
          "coherent kernel caches outlast the pause: its stat rows compare the two designs (a "
          "1 s cache against one kept exact by invalidation), not lookup speed.")
    elif settle > 0:
        p(f"Before each stat and read phase mdbench pauses {settle:g} s (untimed, `-S`).")
    else:
        p("The phases run back to back, as in mdtest: on the FUSE mounts the kernel still caches "
          "entries and attributes created less than 1 s before a stat, so a target that creates "
          "faster gets more stats answered from the kernel cache.")
    p("")
    variants = sorted({os.path.basename(f).split(".")[0] for f in glob.glob(os.path.join(res, "md", "*.txt"))},
                      key=lambda v: (not v.startswith("tree"), int(re.sub(r"\D", "", v.split("-")[1]) or 0)))
    for v in variants:
        loaded = {t: load_md(res, v, t) for t in targets}
        cfg = next((c for c, _ in loaded.values() if c), None)
        if cfg:
            nodes, items, procs = int(cfg["nodes_per_proc"]), int(cfg["items_per_node"]), int(cfg["procs"])
            if int(cfg["depth"]) > 0:
                shape = (f"tree, branching {cfg['branch']}, depth {cfg['depth']} ({nodes} nodes), "
                         f"{items} items per node")
            else:
                shape = f"flat: one directory with {items} items"
            title = (f"### {v}: {procs} process{'es' if procs > 1 else ''}, {shape} — "
                     f"{nodes * items * procs:,} files and {nodes * items * procs:,} directories in all")
        else:
            title, procs, cfg = f"### {v}", 1, {}
        p(title)
        p("")
        ref, ref_label = None, None
        if cfg.get("branch") == "6" and cfg.get("depth") == "4" and cfg.get("items_per_node") == "8" and procs == 1:
            ref, ref_label = JUICEFS_MDTEST, "JuiceFS ref¹"
        elif cfg.get("depth") == "0" and procs == 1:
            ref, ref_label = CUBEFS_1P, "CubeFS ref² (1 proc)"
        elif cfg.get("depth") == "0" and procs == 4:
            ref, ref_label = CUBEFS_4P, "CubeFS ref² (4 procs)"
        hdr = "| phase | " + " | ".join(LABEL[t] for t in targets)
        sep = "|---|" + "---:|" * len(targets)
        for _, _, label in extra:
            hdr += f" | {label}"
            sep += "---:|"
        if ref:
            hdr += f" | {ref_label}"
            sep += "---:|"
        p(hdr + " |")
        p(sep)
        for phase, label in MD_PHASES:
            vals = {t: (loaded[t][1] or {}).get(phase) for t in targets}
            row = f"| {label} | " + " | ".join(fmt(vals[t]) for t in targets)
            for num, base, _ in extra:
                r = ratio(vals.get(num), vals.get(base))
                row += f" | {fmt_ratio_rounds(r, loaded[num][1], loaded[base][1], phase)}"
                # Tree phases of flat runs are one mkdir/rmdir per process: not a rate worth averaging.
                if r and not (phase.startswith("tree") and cfg.get("depth") == "0"):
                    cat_ratios[md_category(phase)][num, base].append(r)
            if ref:
                row += f" | {fmt(ref.get(phase))}"
            p(row + " |")
        p("")
        bad = [t for t in targets if loaded[t][1] is None]
        if bad:
            p(f"Failed or missing: {', '.join(LABEL[t] for t in bad)} (see the mdbench logs).")
            p("")
    p("¹ `mdtest -b 6 -I 8 -z 4`, one task, AWS c5.large client, Redis metadata on another host, "
      "S3 data, empty files — a different machine and a networked metadata engine; context only.  ")
    p("² `mpirun mdtest -n 5000 -u -z 2 -i 3`, 1 client — different hardware and layout; context only.")
    p("")



def emit_notes(p, env, settle, pristine, targets):
    p("## What the numbers do and do not say")
    p("")
    if "passthrough-hp" in targets:
        p("- **passthrough_hp** keeps entries and attributes in the kernel for a day and mounts with "
          "the writeback cache, so the pause does not expire its caches either (its file stat "
          "rows still reach the daemon at a few tens of thousands per second; why was not "
          "analysed); like Tessera it mounts with `default_permissions` (a GETATTR of the parent "
          "after each change in it). Its own opens keep O_DIRECT: on tmpfs (Linux 6.6 and later) "
          "that works and its reads and writes go straight to tmpfs pages, with `splice` moving "
          "write data from `/dev/fuse` to the file. Its removals and creations are single system "
          "calls on the underlying file system, made durable by nothing; Tessera commits each one "
          "to its engine before replying.")
    ll = "passthrough" in targets
    if not ll:
        pt_read = ""
        fuse_read = "*Tessera*"
    elif pristine:
        pt_read = ("*passthrough_ll* passes the O_DIRECT flag on to its own `open()` of the "
                   "underlying file, so it reads the device too. ")
        fuse_read = "*Tessera*"
    else:
        pt_read = ""
        fuse_read = "Both FUSE daemons (passthrough_ll, with O_DIRECT dropped on its side, and Tessera)"
    p("- **Page cache and `direct=1`.** The read file is written once (buffered, then fsync), then "
      "read in a first pass (shown) and by the measured jobs. With O_DIRECT the kernel never caches "
      "the data on the FUSE side, and *local dir* reads go to the block device. " + pt_read +
      fuse_read + " serve the direct reads from files on the local file system with buffered "
      "I/O (Tessera: its 4 MiB block objects in the bucket directory), and those are in the page "
      "cache from the moment they were written — so the FUSE targets' read rows are \"data in "
      "memory\" (as in the JuiceFS reference) while the local dir's are device reads. The device "
      "is a virtual disk that may itself be cached by the host, which is why local dir still "
      "reads at GiB/s.")
    p("- **Tessera's own caches.** Tessera reads whole blocks (4 MiB by default) from the bucket "
      "and keeps them in a memory block cache (`--mem-cache-size`, 256 MiB by default at the time "
      f"of writing). When the {env.get('size', '?')} data file is larger than that cache, the random "
      "reads miss it and each 4 KiB read fetches a whole block: then the rand-read rows measure the "
      "cache policy, not the data path. `--mount-opts \"--mem-cache-size 2048\"` makes the file "
      "fit, for a \"data in cache\" comparison like the JuiceFS reference.")
    p("- **Writes and durability.** All write jobs end with `fsync` (counted in their time). For "
      "local dir O_DIRECT writes reach the device"
      + (("; passthrough_ll writes into the page cache " + ("" if pristine else "(O_DIRECT dropped) ")
          + "and its fsync flushes them to the device") if ll else "") +
      ". Tessera's client "
      "buffers writes, uploads blocks to the bucket directory without fsync (its file store's "
      "default) and commits metadata to SQLite in WAL mode with synchronous=NORMAL, so its fsync "
      "makes data survive a client crash, not a power loss — the write rows are not like-for-like "
      "in durability. With `--writeback`, Tessera's fsync and close fdatasync the staged blocks "
      "(they survive a power loss on the client's disk) but upload them later: other clients see "
      "the data only once it is uploaded.")
    p("- **Random writes on Tessera** turn every 4 KiB write into a slice; the maximum latency "
      "column shows how long a single write can stall while the client flushes them.")
    if not ll:
        p("- **Metadata.** Tessera keeps kernel entry/attr caches for 300 s while no other client "
          "changes the tree (coherent caches).")
    else:
        p("- **Metadata.** passthrough_ll keeps kernel entry/attr caches for 1 s"
          + (" (expired before the stat/read phases by the pause)" if settle > 0 else
             ", so stat phases are partly answered by the kernel") +
          ", Tessera for 300 s while no other client changes the tree (coherent caches)" +
          "; the local directory never leaves the kernel. "
          "`rmdir` on this ext4 (mounted with `discard`) costs milliseconds when the directory is "
          "freed at once, as for the local dir; passthrough_ll holds an O_PATH fd on every inode the "
          "kernel knows and only closes it on FORGET, after the `rmdir` has returned, so its "
          "directory removal beats the local dir's. "
          "passthrough_ll holds one file descriptor per known inode, which bounds the number of "
          "items alive at once (fd limit "
          f"{env.get('nofile', '?')}).")
    rounds = int(env.get("rounds", "1") or 1)
    if rounds > 1:
        p(f"- {rounds} rounds of every fio job and mdbench run, the targets in a rotating order "
          "each round: every figure is the median of its rounds, and a ratio cell shows the ratio "
          "of the medians with, in brackets, the lowest and highest ratio of a single round "
          "(round k of one target against round k of the other, run minutes apart).")
    else:
        p("- One run, no repetitions: treat single figures with care; rerun `bench/run_all.sh` "
          "(or use `--rounds`) to see the spread.")
    p("")


if __name__ == "__main__":
    main()
