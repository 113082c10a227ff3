#!lua name=tessera
-- Tessera's metadata operations as Redis functions (Redis >= 7.0), loaded by
-- RedisMeta (src/meta/redis_meta.cc) with FUNCTION LOAD REPLACE. The library
-- is this file followed by redis_functions_ns.lua and redis_functions_admin.lua,
-- concatenated at build time (src/CMakeLists.txt) into one source. Every file
-- system operation is ONE FCALL: the checks and the changes run atomically
-- inside Redis, so there are no WATCH/MULTI retry loops and no extra round
-- trips. The semantics mirror KvMeta (src/meta/kv_meta.cc) line for line; the
-- conformance suite (tests/meta/meta_conformance_test.cc) runs on both.
--
-- Keys (docs/format.md, "Redis layout"; inode numbers in decimal):
--   setting                   volume settings (JSON)
--   nextInode nextSlice nextSession usedSpace totalInodes   counters
--   i<ino>                    attributes (the same binary record as KvMeta)
--   d<ino>                    hash: name -> entry (type byte + inode, 8 bytes BE)
--   n<ino>                    zset of the names (score 0), for paged readdir
--   c<ino>_<idx>              chunk slice list (24-byte records, appended)
--   k<ino>                    zset of the chunk indexes that exist
--   s<ino>                    symlink target
--   x<ino>                    hash: xattr name -> value
--   lf<ino> / lp<ino>         hash: "<sid>_<owner>" -> flock type / POSIX ranges
--   delinodes                 zset: deleted file inode -> length (chunks to reclaim)
--   delslices                 zset of "<id>_<size>": slices whose objects must go,
--                             score = unix seconds not before which (0: at once)
--   sessions / heartbeat      hash sid -> JSON / zset sid -> unix seconds
--   ss<sid> / sl<sid>         sets: inodes unlinked while open / locked, per session
--   o<client>.<n>             the last operation record of a connection (see `wrap`)
--   u<dir>                    hash: directory statistics l (length), s (space), i (entries),
--                             written by clients about once a second (flush_stats)
--   V<client>                 the sequence number of a client instance's last flush_stats
--   p<ino>                    hash: parent dir -> names there, of a file with several names
--   slicerefs                 hash "<id>_<size>" -> extra chunk lists holding a slice (clones)
--   clones                    counter of clones made (gc scans the chunk lists again if one
--                             ran during its scan: SCAN may miss the copies' keys)
--   Q<kind>_<id> / quotas     hash: a quota's limits and usage / set of the quotas
--
-- Calling convention: every function returns an array whose first element is
-- 0 on success followed by results, or an errno alone. A function that
-- changes state checks everything that can fail before its first write
-- (Redis does not undo a function's writes when it fails midway). State-
-- changing calls carry an operation id (`wrap`, at the end) so that a
-- client may resend them safely.

local EPERM, ENOENT, EIO, E2BIG, EAGAIN, EACCES, EEXIST = 1, 2, 5, 7, 11, 13, 17
local ENODEV, ENOTDIR, EISDIR, EINVAL, EFBIG, ENOSPC = 19, 20, 21, 22, 27, 28
local ENOTEMPTY, ENODATA, EOPNOTSUPP, ESTALE = 39, 61, 95, 116

local S_IFMT, S_IFDIR, S_IFREG, S_IFLNK = 61440, 16384, 32768, 40960
local S_ISUID, S_ISGID, S_ISVTX, S_IXGRP = 2048, 1024, 512, 8
local R_OK, W_OK, X_OK = 4, 2, 1
local ROOT = 1
local TRASH = 4222124650659840 -- 0xF000000000000, kTrashIno (meta.h)
local CHUNK = 67108864
local MAX_FILE = 1125899906842624 -- 2^50, kMaxFileSize
local ATTR = '<BI4I4I4I4I4I8I8i8I4i8I4i8I4'
local SLICE = '>I4I8I4I4I4'
local FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE = 1, 2, 16

-- 32-bit bit operations, only for modes and flags (the bit library is not
-- visible while the library loads, only when its functions run).
local function band(a, b) return bit.band(a, b) end
local function bor(a, b) return bit.bor(a, b) end
local function bnot(a) return bit.bnot(a) end

local function fail(e) error({tessera_errno = e}, 0) end
local function key(prefix, n) return prefix .. string.format('%d', n) end

-- Coherent caches (docs/consistency.md): what the running call changed,
-- published by `wrap` to the clients watching ("i<ino>": attributes or
-- data; "e<parent>/<name>": an entry). Redis runs one call at a time.
local changes = {}
local function changed_inode(ino) changes[#changes + 1] = 'i' .. string.format('%d', ino) end
local function changed_entry(parent, name) changes[#changes + 1] = 'e' .. string.format('%d', parent) .. '/' .. name end
local function chunk_key(ino, idx) return string.format('c%d_%d', ino, idx) end

-- ---------------------------------------------------------------- records

local function decode_attr(v)
  local a = {}
  a.ver, a.mode, a.uid, a.gid, a.nlink, a.rdev, a.length, a.parent, a.asec, a.ansec, a.msec, a.mnsec, a.csec, a.cnsec =
    struct.unpack(ATTR, v)
  return a
end
local function encode_attr(a)
  return struct.pack(ATTR, 1, a.mode, a.uid, a.gid, a.nlink, a.rdev, a.length, a.parent, a.asec, a.ansec, a.msec,
    a.mnsec, a.csec, a.cnsec)
end
local function get_attr(ino)
  local v = redis.call('GET', key('i', ino))
  if not v then return nil end
  return decode_attr(v)
end
local function must_attr(ino)
  local a = get_attr(ino)
  if not a then fail(ENOENT) end
  return a
end
local function put_attr(ino, a)
  redis.call('SET', key('i', ino), encode_attr(a))
  changed_inode(ino)
end
local function set_attr_raw(ino, raw)
  redis.call('SET', key('i', ino), raw)
  changed_inode(ino)
end

local function is_dir(a) return band(a.mode, S_IFMT) == S_IFDIR end
local function is_file(a) return band(a.mode, S_IFMT) == S_IFREG end
local function is_symlink(a) return band(a.mode, S_IFMT) == S_IFLNK end
local function set_ctime(a, now) a.csec, a.cnsec = now[1], now[2] end
local function set_mtime(a, now) a.msec, a.mnsec, a.csec, a.cnsec = now[1], now[2], now[1], now[2] end

local function get_entry(parent, name)
  local v = redis.call('HGET', key('d', parent), name)
  if not v then return nil end
  local t, ino = struct.unpack('>BI8', v)
  return ino, t * 4096
end
local function put_entry(parent, name, ino, mode)
  redis.call('HSET', key('d', parent), name, struct.pack('>BI8', band(mode, S_IFMT) / 4096, ino))
  redis.call('ZADD', key('n', parent), 0, name)
  changed_entry(parent, name)
end
local function del_entry(parent, name)
  redis.call('HDEL', key('d', parent), name)
  redis.call('ZREM', key('n', parent), name)
  changed_entry(parent, name)
end
local function dir_empty(ino) return redis.call('HLEN', key('d', ino)) == 0 end

local function incr(counter, delta)
  if delta ~= 0 then redis.call('INCRBY', counter, delta) end
end
local function counter(name) return tonumber(redis.call('GET', name) or '0') end
local function align4k(n) return math.ceil(n / 4096) * 4096 end

-- ---------------------------------------------------------------- usage

-- Directory statistics (meta.h, DirStat): a call gathers what it changes
-- here, `wrap` returns it to the client as the reply's last element, and the
-- client adds it up and writes it about once a second (flush_stats), as the
-- SQL engines do: no statistics write inside each operation.
local stat_deltas, stat_dirs = {}, {}
local function stat_add(dir, l, s, i)
  local d = stat_deltas[dir]
  if not d then
    d = { 0, 0, 0 }
    stat_deltas[dir] = d
    stat_dirs[#stat_dirs + 1] = dir
  end
  d[1], d[2], d[3] = d[1] + l, d[2] + s, d[3] + i
end
-- The last element of every successful state-changing call's reply:
-- 'TSTAT' and 32 bytes per directory (inode, length, space, entries;
-- big-endian signed 64-bit).
local function encode_stat_deltas()
  local parts = { 'TSTAT' }
  for _, dir in ipairs(stat_dirs) do
    local d = stat_deltas[dir]
    parts[#parts + 1] = struct.pack('>i8i8i8i8', dir, d[1], d[2], d[3])
  end
  return table.concat(parts)
end
-- An entry naming `a` added to (sign 1) or removed from (-1) directory dir.
local function charge_entry(dir, a, sign)
  if band(a.mode, S_IFMT) == S_IFREG then
    stat_add(dir, sign * a.length, sign * align4k(a.length), sign)
  else
    stat_add(dir, 0, 0, sign)
  end
end
-- A file's length changed from old_len to a.length: every directory naming
-- it follows (none while it has no name).
local function charge_length(ino, a, old_len)
  if a.length == old_len or a.nlink == 0 then return end
  local dl, ds = a.length - old_len, align4k(a.length) - align4k(old_len)
  if a.nlink > 1 then
    local ps = redis.call('HGETALL', key('p', ino))
    if #ps > 0 then
      for i = 1, #ps, 2 do
        local n = tonumber(ps[i + 1])
        stat_add(tonumber(ps[i]), dl * n, ds * n, 0)
      end
      return
    end
  end
  stat_add(a.parent, dl, ds, 0)
end
-- Parent records of non-directories with several names: a new name in
-- `parent` (a: before the link); a name gone from `parent` (a.nlink already
-- lowered, at least 1; with one name left, its directory becomes a.parent);
-- a name moved between directories.
local function add_parent(ino, a, parent)
  local k = key('p', ino)
  if a.nlink == 1 then redis.call('HSET', k, string.format('%d', a.parent), 1) end
  redis.call('HINCRBY', k, string.format('%d', parent), 1)
end
local function drop_name(k, dir)
  local f = string.format('%d', dir)
  if redis.call('HINCRBY', k, f, -1) <= 0 then redis.call('HDEL', k, f) end
end
local function drop_parent(ino, a, parent)
  local k = key('p', ino)
  drop_name(k, parent)
  if a.nlink ~= 1 then return end
  local rest = redis.call('HGETALL', k)
  for i = 1, #rest, 2 do
    if tonumber(rest[i + 1]) > 0 then a.parent = tonumber(rest[i]) end
  end
  redis.call('DEL', k)
end
local function move_parent(ino, a, from, to)
  if band(a.mode, S_IFMT) == S_IFDIR or a.nlink < 2 or from == to then return end
  local k = key('p', ino)
  drop_name(k, from)
  redis.call('HINCRBY', k, string.format('%d', to), 1)
end

-- ---------------------------------------------------------------- callers

-- Caller context from args[i..i+2]: uid, gid, supplementary gids "g1,g2".
local function context(args, i)
  local c = { uid = tonumber(args[i]), gid = tonumber(args[i + 1]), gids = {} }
  for g in string.gmatch(args[i + 2], '%d+') do c.gids[tonumber(g)] = true end
  return c
end
local function in_group(c, g) return c.gid == g or c.gids[g] == true end
local function now_of(args, i) return { tonumber(args[i]), tonumber(args[i + 1]) } end

-- POSIX permission check (CheckPermission in src/meta/meta.cc): errno or 0.
local function permission(c, a, mask)
  if mask == 0 then return 0 end
  if c.uid == 0 then
    if band(mask, X_OK) ~= 0 and not is_dir(a) and band(a.mode, 73) == 0 then return EACCES end
    return 0
  end
  local perm
  if c.uid == a.uid then
    perm = band(bit.rshift(a.mode, 6), 7)
  elseif in_group(c, a.gid) then
    perm = band(bit.rshift(a.mode, 3), 7)
  else
    perm = band(a.mode, 7)
  end
  if band(perm, mask) ~= mask then return EACCES end
  return 0
end
local function require_permission(c, a, mask)
  local e = permission(c, a, mask)
  if e ~= 0 then fail(e) end
end

-- A directory the caller may modify (write + search), not removed.
local function writable_dir(c, ino)
  local p = must_attr(ino)
  if not is_dir(p) then fail(ENOTDIR) end
  require_permission(c, p, W_OK + X_OK)
  if p.nlink == 0 then fail(ENOENT) end
  return p
end

-- Sticky directories: only the owner of the entry or of the directory (or
-- root) may remove or rename the entry.
local function sticky_check(c, dir, child)
  if band(dir.mode, S_ISVTX) ~= 0 and c.uid ~= 0 and c.uid ~= dir.uid and c.uid ~= child.uid then fail(EPERM) end
end

-- ---------------------------------------------------------------- data records

-- A chunk list no longer holds slice (id, size): one reference fewer if
-- clones share it, else its objects are queued for deletion (not before
-- not_before). Called once per id per chunk list.
local function queue_slice(id, size, not_before)
  local f = string.format('%d_%d', id, size)
  local r = redis.call('HGET', 'slicerefs', f)
  if r then
    if tonumber(r) <= 1 then redis.call('HDEL', 'slicerefs', f) else redis.call('HINCRBY', 'slicerefs', f, -1) end
    return
  end
  redis.call('ZADD', 'delslices', not_before or 0, f)
end

local function queue_slices(v)
  local seen = {}
  for p = 1, #v - 23, 24 do
    local _, id, size = struct.unpack(SLICE, v, p)
    if id ~= 0 and not seen[id] then
      seen[id] = true
      queue_slice(id, size)
    end
  end
end

-- The records of list v (n records) that show at least one byte. Sorted by
-- start, the records fall into clusters whose ranges chain into one
-- stretch; a record alone in its cluster shows. In a cluster of several,
-- each stretch between the cluster's start and end points shows its newest
-- record, found with one sweep over the points in order and a heap of the
-- records open there (closed ones leave it lazily). O(n log n); the sorted,
-- merged cover this replaced cost O(n) per record once random writes had
-- left thousands of separate intervals, ~160 ms per commit of a few
-- thousand records, all of it with Redis blocked.
local POINT = 2097152 -- 2^21: a point is pos * POINT + record index, exact in a double
local function sweep_cluster(starts, first, last, fin, shown)
  local ends = {}
  for k = first, last do
    local i = starts[k] % POINT
    ends[#ends + 1] = fin[i] * POINT + i
  end
  table.sort(ends)
  local heap, open = {}, {}
  local function push(i)
    heap[#heap + 1] = i
    local c = #heap
    while c > 1 do
      local p = math.floor(c / 2)
      if heap[p] >= heap[c] then break end
      heap[p], heap[c] = heap[c], heap[p]
      c = p
    end
  end
  local function pop()
    local top = #heap
    heap[1] = heap[top]
    heap[top] = nil
    top = top - 1
    local p = 1
    while true do
      local l, r, m = 2 * p, 2 * p + 1, p
      if l <= top and heap[l] > heap[m] then m = l end
      if r <= top and heap[r] > heap[m] then m = r end
      if m == p then break end
      heap[p], heap[m] = heap[m], heap[p]
      p = m
    end
  end
  local si, ei, prev = first, 1, nil
  while ei <= #ends do -- every start comes before its own end
    local x = math.floor(ends[ei] / POINT)
    if si <= last then x = math.min(x, math.floor(starts[si] / POINT)) end
    if prev and x > prev then
      while #heap > 0 and not open[heap[1]] do pop() end
      if #heap > 0 then shown[heap[1]] = true end
    end
    while ei <= #ends and math.floor(ends[ei] / POINT) == x do
      open[ends[ei] % POINT] = nil
      ei = ei + 1
    end
    while si <= last and math.floor(starts[si] / POINT) == x do
      local i = starts[si] % POINT
      open[i] = true
      push(i)
      si = si + 1
    end
    prev = x
  end
end
local function shown_records(v, n)
  local starts, fin = {}, {}
  for i = 1, n do
    local pos, _, _, _, len = struct.unpack(SLICE, v, (i - 1) * 24 + 1)
    if len > 0 then
      starts[#starts + 1] = pos * POINT + i
      fin[i] = pos + len
    end
  end
  table.sort(starts)
  local shown = {}
  local k = 1
  while k <= #starts do
    local first = k
    local reach = fin[starts[k] % POINT]
    k = k + 1
    while k <= #starts and math.floor(starts[k] / POINT) < reach do
      reach = math.max(reach, fin[starts[k] % POINT])
      k = k + 1
    end
    if k - first == 1 then
      shown[starts[first] % POINT] = true
    else
      sweep_cluster(starts, first, k - 1, fin, shown)
    end
  end
  return shown
end

-- Appends slice records to a chunk, then drops the records, old or just
-- added, that the list now hides completely (a commit may carry several
-- passes of one writer over the same bytes), queueing the objects of slices
-- that no record shows any more (so overwritten data does not linger until
-- compaction; a retried commit of the same slice never frees it). A long
-- list (random writes before compaction catches up) is pruned once per
-- PRUNE_EVERY records appended, or half the list's length once that is
-- more, as KvMeta does (AppendSlicesTx). Returns the list length.
local PRUNE_ALWAYS, PRUNE_EVERY = 256, 1024
local function append_slices(ino, idx, added)
  local ck = chunk_key(ino, idx)
  local old = redis.call('GET', ck) or ''
  if old == '' then
    redis.call('ZADD', key('k', ino), idx, idx)
    if #added == 24 then
      redis.call('SET', ck, added)
      return 1
    end
  end
  local v = old .. added
  local n = #v / 24
  local old_n = #old / 24
  local step = 1 -- max(PRUNE_EVERY, half the largest power of 2 not above old_n)
  while step * 2 <= old_n do step = step * 2 end
  step = math.max(PRUNE_EVERY, step / 2)
  local prune = n < POINT and (old_n < PRUNE_ALWAYS or math.floor(old_n / step) ~= math.floor(n / step))
  local hidden, any = {}, false
  if prune then
    local shown_rec = shown_records(v, n)
    for i = 1, n do
      local _, id, _, _, len = struct.unpack(SLICE, v, (i - 1) * 24 + 1)
      if id ~= 0 and len > 0 and not shown_rec[i] then
        hidden[i] = id
        any = true
      end
    end
  end
  if not any then
    if old == '' then redis.call('SET', ck, added) else redis.call('APPEND', ck, added) end
    return n
  end
  local kept, shown = {}, {}
  for i = 1, n do
    if not hidden[i] then
      local rec = string.sub(v, (i - 1) * 24 + 1, i * 24)
      kept[#kept + 1] = rec
      local _, id = struct.unpack(SLICE, rec)
      shown[id] = true
    end
  end
  for i = 1, n do
    local id = hidden[i]
    if id and not shown[id] then
      local _, _, size = struct.unpack(SLICE, v, (i - 1) * 24 + 1)
      queue_slice(id, size)
      shown[id] = true -- queue once
    end
  end
  redis.call('SET', ck, table.concat(kept))
  return #kept
end

-- Hides [off, e) behind hole records in the chunks that have data there.
local function append_hole(ino, off, e)
  if off >= e then return end
  local first, last = math.floor(off / CHUNK), math.floor((e - 1) / CHUNK)
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', key('k', ino), first, last)) do
    local idx = tonumber(s)
    local cs = idx * CHUNK
    local pos = math.max(off, cs) - cs
    local len = math.min(e, cs + CHUNK) - cs - pos
    append_slices(ino, idx, struct.pack(SLICE, pos, 0, len, 0, len))
  end
end

local function drop_chunk(ino, idx)
  local ck = chunk_key(ino, idx)
  local v = redis.call('GET', ck)
  if v then queue_slices(v) end
  redis.call('DEL', ck)
  redis.call('ZREM', key('k', ino), idx)
end

local function truncate_chunks(ino, old_len, new_len)
  if new_len >= old_len then return end
  local first_dead = math.ceil(new_len / CHUNK)
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', key('k', ino), first_dead, '+inf')) do drop_chunk(ino, tonumber(s)) end
  if new_len % CHUNK ~= 0 then append_hole(ino, new_len, math.min(old_len, first_dead * CHUNK)) end
end

local function check_space(capacity, delta)
  if capacity > 0 and delta > 0 and counter('usedSpace') + delta > capacity then fail(ENOSPC) end
end

-- ---------------------------------------------------------------- inode lifetime

local function delete_inode(ino, a)
  redis.call('DEL', key('i', ino), key('x', ino), key('lf', ino), key('lp', ino), key('s', ino), key('u', ino),
             key('p', ino))
  changed_inode(ino)
  if is_file(a) then
    redis.call('ZADD', 'delinodes', a.length, string.format('%d', ino))
    incr('usedSpace', -align4k(a.length))
  end
  incr('totalInodes', -1)
end

-- A directory's link count follows its subdirectories (delta 1 or -1),
-- except an hour's directory in the trash, whose count stays 2 (meta.h,
-- CountSubdir): every directory removal of the hour enters it.
local function count_subdir(dir, a, delta)
  if dir <= TRASH then a.nlink = a.nlink + delta end
end

-- The trash (meta.h, kTrashIno): with `hour` the name of this hour's trash
-- directory ('' = trash off), an inode whose last name went (nlink at 0)
-- moves into it as "<parent>-<ino>-<name>" and true is returned; false: the
-- caller deletes it (trash off, /.trash missing, or removed from the trash).
local function trash_inode(hour, now, parent, name, ino, a)
  if hour == '' or parent >= TRASH then return false end
  local hino = TRASH + 1 + math.floor(now[1] / 3600)
  local h = get_attr(hino)
  -- Removed (by root) and still held by a session: an entry put there would
  -- be out of every listing and purge, so this removal is final.
  if h and h.nlink == 0 then return false end
  local made = not h
  if made then -- the first removal this hour (this hour's directory implies /.trash)
    local t = get_attr(TRASH)
    if not t then return false end
    h = { mode = S_IFDIR + 365, uid = 0, gid = 0, nlink = 2, rdev = 0, length = 0, parent = TRASH,
          asec = now[1], ansec = now[2], msec = now[1], mnsec = now[2], csec = now[1], cnsec = now[2] }
    put_entry(TRASH, hour, hino, S_IFDIR)
    t.nlink = t.nlink + 1
    set_mtime(t, now)
    put_attr(TRASH, t)
    incr('totalInodes', 1)
    stat_add(TRASH, 0, 0, 1)
  end
  local tname = string.sub(string.format('%d-%d-', parent, ino) .. name, 1, 255)
  put_entry(hino, tname, ino, a.mode)
  a.nlink = is_dir(a) and 2 or 1 -- the hour's own count does not follow (count_subdir)
  a.parent = hino
  set_ctime(a, now)
  put_attr(ino, a)
  charge_entry(hino, a, 1)
  -- The hour's directory's times move by whole seconds (KvMeta::TrashTx):
  -- one write of its record a second instead of one a removal.
  if made or h.msec ~= now[1] then
    set_mtime(h, now)
    put_attr(hino, h)
  end
  return true
end

-- Creates /.trash if missing (meta.h, EnsureTrash).
local function ensure_trash(args)
  local now = now_of(args, 1)
  if get_attr(TRASH) then return { 0 } end
  if get_entry(ROOT, '.trash') then fail(EEXIST) end
  local root = must_attr(ROOT)
  local t = { mode = S_IFDIR + 365, uid = 0, gid = 0, nlink = 2, rdev = 0, length = 0, parent = ROOT,
              asec = now[1], ansec = now[2], msec = now[1], mnsec = now[2], csec = now[1], cnsec = now[2] }
  put_attr(TRASH, t)
  put_entry(ROOT, '.trash', TRASH, S_IFDIR)
  root.nlink = root.nlink + 1
  put_attr(ROOT, root)
  incr('totalInodes', 1)
  stat_add(ROOT, 0, 0, 1)
  return { 0 }
end

-- nlink reached 0: with a session, the inode is kept ("sustained") for that
-- session, which releases it once it holds no reference (the client decides,
-- it knows its open files); returns the inode so it can. Without a session it
-- goes at once.
local function release_inode(sid, ino, a)
  if sid ~= '0' then
    put_attr(ino, a)
    redis.call('SADD', 'ss' .. sid, string.format('%d', ino))
    return ino
  end
  delete_inode(ino, a)
  return 0
end
