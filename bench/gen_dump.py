#!/usr/bin/env python3
"""Writes a synthetic Tessera metadata dump (docs/format.md, section 5) of
FILES regular files, 1,000 per directory, each with one 4 KiB slice, to
stdout: input for `tessera load` benchmarks (bench/dump_load.sh) and tests
that need a big dump without building a big volume first.

usage: gen_dump.py FILES [BUCKET]
"""
import json
import sys
import uuid

def main():
    files = int(sys.argv[1])
    bucket = sys.argv[2] if len(sys.argv) > 2 else "/nonexistent/bucket"
    per_dir = 1000
    dirs = (files + per_dir - 1) // per_dir
    out = sys.stdout
    t = [1796000000, 0]
    dump = lambda obj: out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    next_ino = 1 + dirs + files
    dump({"tessera_dump": 1,
          "setting": {"BlockSize": 4194304, "Bucket": bucket, "Capacity": 0, "Compression": "none",
                      "Inodes": 0, "Name": "synthetic", "Storage": "file", "TrashDays": 0,
                      "UUID": str(uuid.uuid4()), "Version": 1},
          "counters": {"nextInode": next_ino, "nextSlice": files, "nextSession": 0,
                       "usedSpace": files * 4096, "totalInodes": 1 + dirs + files},
          "root": 1})
    def inode(ino, mode, nlink, length, parent, chunks=None):
        rec = {"i": ino, "mode": mode, "uid": 0, "gid": 0, "nlink": nlink, "rdev": 0, "length": length,
               "parent": parent, "atime": t, "mtime": t, "ctime": t}
        if chunks is not None:
            rec["chunks"] = chunks
        dump(rec)
    inode(1, 0o40755, 2 + dirs, 0, 1)
    entries = slices = 0
    for d in range(dirs):
        page = [["d%d" % d, 2 + d, 4]]
        dump({"d": 1, "e": page})
    entries += dirs
    inodes = 1
    ino = 2 + dirs
    for d in range(dirs):
        n = min(per_dir, files - d * per_dir)
        inode(2 + d, 0o40755, 2, 0, 1)
        inodes += 1
        first = ino
        for lo in range(0, n, 1000):
            dump({"d": 2 + d, "e": [["f%d" % i, first + i, 8] for i in range(lo, min(n, lo + 1000))]})
        entries += n
        for i in range(n):
            inode(first + i, 0o100644, 1, 4096, 2 + d, [[0, [[0, first + i, 4096, 0, 4096]]]])
            slices += 1
            inodes += 1
        ino += n
    dump({"end": {"inodes": inodes, "entries": entries, "slices": slices}})

main()
