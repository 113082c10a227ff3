#!lua name=tessera
-- Tessera's metadata operations as Redis functions (Redis >= 7.0), loaded by
-- RedisMeta (src/meta/redis_meta.cc) with FUNCTION LOAD REPLACE. Every file
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
--   u<dir>                    hash: directory statistics l (length), s (space), i (entries)
--   p<ino>                    hash: parent dir -> names there, of a file with several names
--   slicerefs                 hash "<id>_<size>" -> extra chunk lists holding a slice (clones)
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

-- Directory statistics (meta.h, DirStat), kept inside each function: exact,
-- no extra round trip.
local function stat_add(dir, l, s, i)
  local k = key('u', dir)
  if l ~= 0 then redis.call('HINCRBY', k, 'l', string.format('%d', l)) end
  if s ~= 0 then redis.call('HINCRBY', k, 's', string.format('%d', s)) end
  if i ~= 0 then redis.call('HINCRBY', k, 'i', string.format('%d', i)) end
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

-- Is [s, e) inside one interval of the sorted, merged list cov?
local function covered(cov, s, e)
  -- the last interval that starts at or before s (binary search)
  local lo, hi = 1, #cov
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if cov[mid][1] <= s then lo = mid + 1 else hi = mid - 1 end
  end
  return hi >= 1 and e <= cov[hi][2]
end
-- Adds [s, e) to the sorted, merged interval list cov, in place (returns it):
-- O(log n) to find the place, plus the intervals it swallows.
local function cover(cov, s, e)
  local n = #cov
  local lo, hi = 1, n
  while lo <= hi do -- first interval that ends at or after s
    local mid = math.floor((lo + hi) / 2)
    if cov[mid][2] < s then lo = mid + 1 else hi = mid - 1 end
  end
  local first = lo
  local last = first - 1
  while last < n and cov[last + 1][1] <= e do last = last + 1 end
  if last < first then
    table.insert(cov, first, { s, e })
    return cov
  end
  cov[first] = { math.min(s, cov[first][1]), math.max(e, cov[last][2]) }
  for _ = first + 1, last do table.remove(cov, first + 1) end
  return cov
end

-- Appends slice records to a chunk, then drops the records, old or just
-- added, that the list now hides completely (a commit may carry several
-- passes of one writer over the same bytes), queueing the objects of slices
-- that no record shows any more (so overwritten data does not linger until
-- compaction; a retried commit of the same slice never frees it). Returns the
-- list length.
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
  local cov, hidden, any = {}, {}, false
  for i = n, 1, -1 do
    local pos, id, _, _, len = struct.unpack(SLICE, v, (i - 1) * 24 + 1)
    if len > 0 then
      if id ~= 0 and covered(cov, pos, pos + len) then
        hidden[i] = id
        any = true
      else
        cov = cover(cov, pos, pos + len)
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

-- The trash (meta.h, kTrashIno): with `hour` the name of this hour's trash
-- directory ('' = trash off), an inode whose last name went (nlink at 0)
-- moves into it as "<parent>-<ino>-<name>" and true is returned; false: the
-- caller deletes it (trash off, /.trash missing, or removed from the trash).
local function trash_inode(hour, now, parent, name, ino, a)
  if hour == '' or parent >= TRASH then return false end
  local t = get_attr(TRASH)
  if not t then return false end
  local hino = TRASH + 1 + math.floor(now[1] / 3600)
  local h = get_attr(hino)
  if not h then
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
  if is_dir(a) then
    a.nlink = 2
    h.nlink = h.nlink + 1
  else
    a.nlink = 1
  end
  a.parent = hino
  set_ctime(a, now)
  put_attr(ino, a)
  charge_entry(hino, a, 1)
  set_mtime(h, now)
  put_attr(hino, h)
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

-- ---------------------------------------------------------------- namespace

local function lookup(args)
  local c, parent, name = context(args, 1), tonumber(args[4]), args[5]
  local p = must_attr(parent)
  if not is_dir(p) then fail(ENOTDIR) end
  require_permission(c, p, X_OK)
  local ino
  if name == '.' then
    ino = parent
  elseif name == '..' then
    ino = p.parent
  else
    ino = get_entry(parent, name)
    if not ino then fail(ENOENT) end
  end
  local v = redis.call('GET', key('i', ino))
  if not v then fail(ENOENT) end
  return { 0, ino, v }
end

local function mknod(args)
  local c, now = context(args, 1), now_of(args, 4)
  local parent, name, ino = tonumber(args[6]), args[7], tonumber(args[8])
  local ftype, perm, rdev, target = tonumber(args[9]), tonumber(args[10]), tonumber(args[11]), args[12]
  local inode_limit = tonumber(args[13])
  local p = writable_dir(c, parent)
  if get_entry(parent, name) then fail(EEXIST) end
  if inode_limit > 0 and counter('totalInodes') >= inode_limit then fail(ENOSPC) end
  local a = { uid = c.uid, gid = c.gid, rdev = 0, length = 0, parent = parent }
  if band(p.mode, S_ISGID) ~= 0 then -- BSD group semantics for SGID directories
    a.gid = p.gid
    if ftype == S_IFDIR then
      perm = bor(perm, S_ISGID)
    elseif band(perm, S_ISGID + S_IXGRP) == S_ISGID + S_IXGRP and c.uid ~= 0 and not in_group(c, a.gid) then
      perm = band(perm, bnot(S_ISGID))
    end
  end
  a.mode = ftype + perm
  a.nlink = ftype == S_IFDIR and 2 or 1
  if ftype == 8192 or ftype == 24576 then a.rdev = rdev end -- S_IFCHR, S_IFBLK
  if ftype == S_IFLNK then a.length = #target end
  a.asec, a.ansec, a.msec, a.mnsec, a.csec, a.cnsec = now[1], now[2], now[1], now[2], now[1], now[2]
  local raw = encode_attr(a)
  set_attr_raw(ino, raw)
  if ftype == S_IFLNK then redis.call('SET', key('s', ino), target) end
  put_entry(parent, name, ino, ftype)
  if ftype == S_IFDIR then p.nlink = p.nlink + 1 end
  set_mtime(p, now)
  put_attr(parent, p)
  incr('totalInodes', 1)
  stat_add(parent, 0, 0, 1)
  return { 0, raw, encode_attr(p) }
end

-- The writable parent, the entry `name` in it and the entry's inode, checked
-- for removal (write+search, sticky bit).
local function removable_entry(c, parent, name)
  local p = writable_dir(c, parent)
  local ino = get_entry(parent, name)
  if not ino then fail(ENOENT) end
  local a = must_attr(ino)
  sticky_check(c, p, a)
  return p, ino, a
end

local function unlink(args)
  local c, now, sid, parent, name = context(args, 1), now_of(args, 4), args[6], tonumber(args[7]), args[8]
  local p, ino, a = removable_entry(c, parent, name)
  if is_dir(a) then fail(EISDIR) end
  local before = encode_attr(a)
  del_entry(parent, name)
  set_mtime(p, now)
  put_attr(parent, p)
  charge_entry(parent, a, -1)
  a.nlink = a.nlink - 1
  set_ctime(a, now)
  local praw = encode_attr(p)
  if a.nlink > 0 then
    drop_parent(ino, a, parent)
    put_attr(ino, a)
    return { 0, 0, praw, ino, before }
  end
  if trash_inode(args[9], now, parent, name, ino, a) then return { 0, 0, praw, ino, before } end
  return { 0, release_inode(sid, ino, a), praw, ino, before }
end

local function rmdir(args)
  local c, now, sid, parent, name = context(args, 1), now_of(args, 4), args[6], tonumber(args[7]), args[8]
  local p, ino, a = removable_entry(c, parent, name)
  if not is_dir(a) then fail(ENOTDIR) end
  if not dir_empty(ino) then fail(ENOTEMPTY) end
  local before = encode_attr(a)
  del_entry(parent, name)
  p.nlink = p.nlink - 1
  set_mtime(p, now)
  put_attr(parent, p)
  stat_add(parent, 0, 0, -1)
  a.nlink = 0
  set_ctime(a, now)
  local praw = encode_attr(p)
  if trash_inode(args[9], now, parent, name, ino, a) then return { 0, 0, praw, ino, before } end
  return { 0, release_inode(sid, ino, a), praw, ino, before }
end

-- Would moving directory `moved` below `new_parent` make it its own descendant?
local function would_loop(moved, new_parent)
  local cur, depth = new_parent, 0
  while cur ~= ROOT and depth < 100000 do
    if cur == moved then return true end
    cur = must_attr(cur).parent
    depth = depth + 1
  end
  return cur == moved
end

-- Rename with POSIX and renameat2 semantics (see KvMeta::Rename).
local function rename(args)
  local c, now, sid = context(args, 1), now_of(args, 4), args[6]
  local psrc, nsrc, pdst, ndst, flags = tonumber(args[7]), args[8], tonumber(args[9]), args[10], tonumber(args[11])
  local noreplace, exchange = band(flags, 1) ~= 0, band(flags, 2) ~= 0
  local sp = writable_dir(c, psrc)
  local dp = sp
  if pdst ~= psrc then dp = writable_dir(c, pdst) end
  local sino, stype = get_entry(psrc, nsrc)
  if not sino then fail(ENOENT) end
  local sattr = must_attr(sino)
  local dino, dtype = get_entry(pdst, ndst)
  local dattr
  if dino then dattr = must_attr(dino) end
  if exchange and not dino then fail(ENOENT) end
  if noreplace and dino then fail(EEXIST) end
  if dino and dino == sino then return { 0, sino, encode_attr(sattr), 0 } end
  sticky_check(c, sp, sattr)
  if dino then sticky_check(c, dp, dattr) end
  if is_dir(sattr) and psrc ~= pdst then
    if would_loop(sino, pdst) then fail(EINVAL) end
    require_permission(c, sattr, W_OK)
  end
  local released = 0
  if exchange then
    if is_dir(dattr) and psrc ~= pdst then
      if would_loop(dino, psrc) then fail(EINVAL) end
      require_permission(c, dattr, W_OK)
    end
    put_entry(psrc, nsrc, dino, dtype)
    put_entry(pdst, ndst, sino, stype)
    if psrc ~= pdst then
      charge_entry(psrc, sattr, -1)
      charge_entry(psrc, dattr, 1)
      charge_entry(pdst, dattr, -1)
      charge_entry(pdst, sattr, 1)
      move_parent(sino, sattr, psrc, pdst)
      move_parent(dino, dattr, pdst, psrc)
      if is_dir(sattr) then sp.nlink = sp.nlink - 1; dp.nlink = dp.nlink + 1 end
      if is_dir(dattr) then dp.nlink = dp.nlink - 1; sp.nlink = sp.nlink + 1 end
      sattr.parent = pdst
      dattr.parent = psrc
    end
    set_ctime(sattr, now)
    set_ctime(dattr, now)
    put_attr(sino, sattr)
    put_attr(dino, dattr)
  else
    if dino then
      if is_dir(sattr) and not is_dir(dattr) then fail(ENOTDIR) end
      if not is_dir(sattr) and is_dir(dattr) then fail(EISDIR) end
      if is_dir(dattr) and not dir_empty(dino) then fail(ENOTEMPTY) end
    end
    del_entry(psrc, nsrc)
    put_entry(pdst, ndst, sino, stype)
    if psrc ~= pdst then
      charge_entry(psrc, sattr, -1)
      charge_entry(pdst, sattr, 1)
      move_parent(sino, sattr, psrc, pdst)
    end
    if dino then
      charge_entry(pdst, dattr, -1)
      if is_dir(dattr) then
        dp.nlink = dp.nlink - 1
        dattr.nlink = 0
      else
        dattr.nlink = dattr.nlink - 1
      end
      set_ctime(dattr, now)
      if dattr.nlink > 0 then
        drop_parent(dino, dattr, pdst)
        put_attr(dino, dattr)
      elseif not trash_inode(args[12], now, pdst, ndst, dino, dattr) then
        released = release_inode(sid, dino, dattr)
      end
    end
    if is_dir(sattr) and psrc ~= pdst then
      sp.nlink = sp.nlink - 1
      dp.nlink = dp.nlink + 1
    end
    sattr.parent = pdst
    set_ctime(sattr, now)
    put_attr(sino, sattr)
  end
  set_mtime(sp, now)
  set_mtime(dp, now)
  put_attr(psrc, sp)
  if pdst ~= psrc then put_attr(pdst, dp) end
  return { 0, sino, encode_attr(sattr), released, encode_attr(sp), pdst ~= psrc and encode_attr(dp) or '', dino or 0 }
end

local function link(args)
  local c, now, ino, parent, name = context(args, 1), now_of(args, 4), tonumber(args[6]), tonumber(args[7]), args[8]
  local a = must_attr(ino)
  if is_dir(a) then fail(EPERM) end
  if a.nlink == 0 then fail(ENOENT) end
  local p = writable_dir(c, parent)
  if get_entry(parent, name) then fail(EEXIST) end
  put_entry(parent, name, ino, a.mode)
  set_mtime(p, now)
  put_attr(parent, p)
  add_parent(ino, a, parent)
  charge_entry(parent, a, 1)
  a.nlink = a.nlink + 1
  set_ctime(a, now)
  local raw = encode_attr(a)
  set_attr_raw(ino, raw)
  return { 0, raw, encode_attr(p) }
end

-- One page of a directory: up to `limit` names after `after` in byte order.
local function readdir(args)
  local c, ino, plus, after, limit = context(args, 1), tonumber(args[4]), args[5] == '1', args[6], tonumber(args[7])
  local a = must_attr(ino)
  if not is_dir(a) then fail(ENOTDIR) end
  require_permission(c, a, R_OK)
  local from = after == '' and '-' or '(' .. after
  local names = redis.call('ZRANGEBYLEX', key('n', ino), from, '+', 'LIMIT', 0, limit + 1)
  local more = 0
  if #names > limit then
    names[#names] = nil
    more = 1
  end
  if #names == 0 then return { 0, more, {}, {}, {} } end
  local entries = redis.call('HMGET', key('d', ino), unpack(names))
  local attrs = {}
  if plus then
    local keys = {}
    for i, e in ipairs(entries) do
      if e then keys[#keys + 1] = key('i', select(2, struct.unpack('>BI8', e))) end
    end
    if #keys > 0 then attrs = redis.call('MGET', unpack(keys)) end
  end
  return { 0, more, names, entries, attrs }
end

-- ---------------------------------------------------------------- attributes

local function setattr(args)
  local c, now, ino, mask = context(args, 1), now_of(args, 4), tonumber(args[6]), tonumber(args[7])
  local in_mode, in_uid, in_gid = tonumber(args[8]), tonumber(args[9]), tonumber(args[10])
  local in_atime, in_mtime, in_ctime = now_of(args, 11), now_of(args, 13), now_of(args, 15)
  local SET_MODE, SET_UID, SET_GID, SET_ATIME, SET_MTIME, SET_ATIME_NOW, SET_MTIME_NOW, SET_CTIME =
    1, 2, 4, 8, 16, 32, 64, 128
  local function has(bits) return band(mask, bits) ~= 0 end
  local cur = must_attr(ino)
  local nxt = decode_attr(encode_attr(cur))
  local owner = c.uid == 0 or c.uid == cur.uid
  if has(SET_UID + SET_GID) then
    local uid = has(SET_UID) and in_uid or cur.uid
    local gid = has(SET_GID) and in_gid or cur.gid
    if c.uid ~= 0 then
      if c.uid ~= cur.uid or uid ~= cur.uid then fail(EPERM) end
      if gid ~= cur.gid and not in_group(c, gid) then fail(EPERM) end
    end
    if not is_dir(cur) and (uid ~= cur.uid or gid ~= cur.gid or c.uid ~= 0) then
      nxt.mode = band(nxt.mode, bnot(S_ISUID))
      if band(nxt.mode, S_IXGRP) ~= 0 then nxt.mode = band(nxt.mode, bnot(S_ISGID)) end
    end
    nxt.uid, nxt.gid = uid, gid
  end
  if has(SET_MODE) then
    local perm = band(in_mode, 4095)
    local cleared = band(cur.mode, band(4095, bnot(S_ISUID + S_ISGID)))
    local kill_priv_only = perm == cleared or perm == band(cur.mode, band(4095, bnot(S_ISUID)))
    if not owner and not (kill_priv_only and permission(c, cur, W_OK) == 0) then fail(EPERM) end
    if c.uid ~= 0 and band(perm, S_ISGID) ~= 0 and not in_group(c, nxt.gid) and not is_dir(cur) then
      perm = band(perm, bnot(S_ISGID))
    end
    nxt.mode = band(cur.mode, S_IFMT) + perm
  end
  if has(SET_ATIME + SET_MTIME + SET_ATIME_NOW + SET_MTIME_NOW) then
    local explicit = (has(SET_ATIME) and not has(SET_ATIME_NOW)) or (has(SET_MTIME) and not has(SET_MTIME_NOW))
    if explicit then
      if not owner then fail(EPERM) end
    elseif not owner and permission(c, cur, W_OK) ~= 0 then
      fail(EACCES)
    end
    if has(SET_ATIME_NOW) then
      nxt.asec, nxt.ansec = now[1], now[2]
    elseif has(SET_ATIME) then
      nxt.asec, nxt.ansec = in_atime[1], in_atime[2]
    end
    if has(SET_MTIME_NOW) then
      nxt.msec, nxt.mnsec = now[1], now[2]
    elseif has(SET_MTIME) then
      nxt.msec, nxt.mnsec = in_mtime[1], in_mtime[2]
    end
  end
  if has(SET_CTIME) then set_ctime(nxt, in_ctime) else set_ctime(nxt, now) end
  local raw = encode_attr(nxt)
  set_attr_raw(ino, raw)
  return { 0, raw }
end

local function truncate(args)
  local c, now, ino, length = context(args, 1), now_of(args, 4), tonumber(args[6]), tonumber(args[7])
  local check_perm, capacity = args[8] == '1', tonumber(args[9])
  local a = must_attr(ino)
  if is_dir(a) then fail(EISDIR) end
  if not is_file(a) then fail(EINVAL) end
  if check_perm then require_permission(c, a, W_OK) end
  local delta = align4k(length) - align4k(a.length)
  check_space(capacity, delta)
  truncate_chunks(ino, a.length, length)
  incr('usedSpace', delta)
  local old_len = a.length
  a.length = length
  charge_length(ino, a, old_len)
  set_mtime(a, now)
  local raw = encode_attr(a)
  set_attr_raw(ino, raw)
  return { 0, raw }
end

local function fallocate(args)
  local now, ino, mode = now_of(args, 4), tonumber(args[6]), tonumber(args[7])
  local off, len, capacity = tonumber(args[8]), tonumber(args[9]), tonumber(args[10])
  local a = must_attr(ino)
  if is_dir(a) then fail(EISDIR) end
  if not is_file(a) then fail(ENODEV) end
  local e = off + len
  local zeroing = band(mode, FALLOC_PUNCH_HOLE + FALLOC_ZERO_RANGE) ~= 0
  local grows = band(mode, FALLOC_KEEP_SIZE) == 0 and e > a.length
  local delta = grows and align4k(e) - align4k(a.length) or 0
  -- Everything that can fail, before any write: space (capacity is
  -- FallocateSpace, never 0 here), then the largest file.
  check_space(capacity, delta)
  if e > MAX_FILE then fail(EFBIG) end
  if zeroing then append_hole(ino, off, math.min(e, a.length)) end
  local changed = zeroing
  if grows then
    incr('usedSpace', delta)
    local old_len = a.length
    a.length = e
    charge_length(ino, a, old_len)
    changed = true
  end
  if changed then set_mtime(a, now) end
  local raw = encode_attr(a)
  if changed then set_attr_raw(ino, raw) end
  return { 0, raw }
end

-- ---------------------------------------------------------------- data

-- A session that other clients cleaned (its client was cut off longer than
-- the session timeout) may not write: what it holds was taken over.
local function live_session(sid)
  if sid ~= '0' and redis.call('HEXISTS', 'sessions', sid) == 0 then fail(ESTALE) end
end

-- args: ino, mtime sec, nsec, capacity, sid, then (chunk index, slice records)*.
local function write(args)
  local ino, mtime, capacity = tonumber(args[1]), now_of(args, 2), tonumber(args[4])
  live_session(args[5])
  local a = must_attr(ino)
  if not is_file(a) then fail(EPERM) end
  local e = a.length
  for i = 6, #args, 2 do
    local base = tonumber(args[i]) * CHUNK
    local recs = args[i + 1]
    for p = 1, #recs - 23, 24 do
      local pos, _, _, _, len = struct.unpack(SLICE, recs, p)
      e = math.max(e, base + pos + len)
    end
  end
  if e > a.length then
    local delta = align4k(e) - align4k(a.length)
    check_space(capacity, delta)
    incr('usedSpace', delta)
    local old_len = a.length
    a.length = e
    charge_length(ino, a, old_len)
  end
  local counts = {}
  for i = 6, #args, 2 do counts[#counts + 1] = append_slices(ino, tonumber(args[i]), args[i + 1]) end
  set_mtime(a, mtime)
  local raw = encode_attr(a)
  set_attr_raw(ino, raw)
  return { 0, raw, counts }
end

-- Replaces the slices a chunk list begins with (`expected`, as records) by
-- `replacement`; EAGAIN when the list changed meanwhile.
-- The slices a compaction replaces are queued for deletion at `args[5]`
-- (unix seconds; 0 = at once): with the trash on, not before trash-days
-- have passed when a metadata dump may refer to them (ids up to the backup
-- mark, see backup_mark), so that the dump stays readable.
local function compact(args)
  local ino, idx, expected, replacement = tonumber(args[1]), tonumber(args[2]), args[3], args[4]
  local not_before = tonumber(args[5] or '0')
  local mark = not_before > 0 and tonumber(redis.call('GET', 'backupSliceMark') or '0') or 0
  local ck = chunk_key(ino, idx)
  local v = redis.call('GET', ck)
  if not v or string.sub(v, 1, #expected) ~= expected then return { EAGAIN } end
  local kept = {}
  for p = 1, #replacement - 23, 24 do
    local _, id = struct.unpack(SLICE, replacement, p)
    kept[id] = true
  end
  for p = #expected + 1, #v - 23, 24 do -- still in the list after the replaced part
    local _, id = struct.unpack(SLICE, v, p)
    kept[id] = true
  end
  for p = 1, #expected - 23, 24 do
    local _, id, size = struct.unpack(SLICE, expected, p)
    if id ~= 0 and not kept[id] then
      kept[id] = true -- once per id
      queue_slice(id, size, id <= mark and not_before or 0)
    end
  end
  local nv = replacement .. string.sub(v, #expected + 1)
  if nv == '' then
    redis.call('DEL', ck)
    redis.call('ZREM', key('k', ino), idx)
  else
    redis.call('SET', ck, nv)
  end
  return { 0 }
end

-- ---------------------------------------------------------------- xattrs

local function starts(s, prefix) return string.sub(s, 1, #prefix) == prefix end

-- See XattrAccess in kv_meta.cc.
local function xattr_access(c, a, name, mask)
  if starts(name, 'user.') then
    if not is_file(a) and not is_dir(a) then fail(band(mask, W_OK) ~= 0 and EPERM or ENODATA) end
    require_permission(c, a, mask)
  elseif starts(name, 'trusted.') then
    if c.uid ~= 0 then fail(EPERM) end
  elseif starts(name, 'security.') or starts(name, 'system.') then
    if band(mask, W_OK) ~= 0 and c.uid ~= 0 and c.uid ~= a.uid then fail(EPERM) end
  else
    fail(EOPNOTSUPP)
  end
end

local function getxattr(args)
  local c, ino, name = context(args, 1), tonumber(args[4]), args[5]
  xattr_access(c, must_attr(ino), name, R_OK)
  local v = redis.call('HGET', key('x', ino), name)
  if not v then fail(ENODATA) end
  return { 0, v }
end

local function setxattr(args)
  local c, now, ino, name, value, flags = context(args, 1), now_of(args, 4), tonumber(args[6]), args[7], args[8],
    tonumber(args[9])
  local a = must_attr(ino)
  xattr_access(c, a, name, W_OK)
  local exists = redis.call('HEXISTS', key('x', ino), name) == 1
  if exists and band(flags, 1) ~= 0 then fail(EEXIST) end -- XATTR_CREATE
  if not exists and band(flags, 2) ~= 0 then fail(ENODATA) end -- XATTR_REPLACE
  redis.call('HSET', key('x', ino), name, value)
  set_ctime(a, now)
  put_attr(ino, a)
  return { 0 }
end

local function listxattr(args)
  local ino = tonumber(args[4])
  must_attr(ino)
  return { 0, redis.call('HKEYS', key('x', ino)) }
end

local function removexattr(args)
  local c, now, ino, name = context(args, 1), now_of(args, 4), tonumber(args[6]), args[7]
  local a = must_attr(ino)
  xattr_access(c, a, name, W_OK)
  if redis.call('HDEL', key('x', ino), name) == 0 then fail(ENODATA) end
  set_ctime(a, now)
  put_attr(ino, a)
  return { 0 }
end

-- ---------------------------------------------------------------- locks
-- Lock holders are "<sid>_<owner>" (decimal strings, compared as strings);
-- flock values are the type; POSIX values are "type,start,end,pid;" ranges
-- (inclusive, end 2^53 = to EOF).

local function flock(args)
  local sid, ino, owner, ltype, pid = args[1], tonumber(args[2]), args[3], tonumber(args[4]), args[5]
  must_attr(ino)
  local hk, me = key('lf', ino), sid .. '_' .. owner
  if ltype == 0 then
    redis.call('HDEL', hk, me)
    return { 0 }
  end
  local all = redis.call('HGETALL', hk)
  for i = 1, #all, 2 do
    if all[i] ~= me then
      local held = tonumber(string.match(all[i + 1], '^%d+'))
      if ltype == 2 or held == 2 then fail(EAGAIN) end
    end
  end
  redis.call('HSET', hk, me, ltype .. ',' .. pid)
  redis.call('SADD', 'sl' .. sid, string.format('%d', ino))
  return { 0 }
end

local function parse_ranges(s)
  local out = {}
  for t, b, e, p in string.gmatch(s, '(%d+),(%d+),(%d+),(%d+);') do
    out[#out + 1] = { tonumber(t), tonumber(b), tonumber(e), tonumber(p) }
  end
  return out
end
local function format_ranges(ranges)
  local parts = {}
  for _, r in ipairs(ranges) do parts[#parts + 1] = string.format('%d,%d,%d,%d;', r[1], r[2], r[3], r[4]) end
  return table.concat(parts)
end

-- The first lock of another holder that conflicts with (ltype, [b, e]).
local function conflict(all, me, ltype, b, e)
  for i = 1, #all, 2 do
    if all[i] ~= me then
      for _, r in ipairs(parse_ranges(all[i + 1])) do
        if r[2] <= e and b <= r[3] and (ltype == 2 or r[1] == 2) then return all[i], r end
      end
    end
  end
  return nil
end

local function getlk(args)
  local sid, ino, owner, ltype, b, e = args[1], tonumber(args[2]), args[3], tonumber(args[4]), tonumber(args[5]),
    tonumber(args[6])
  local all = redis.call('HGETALL', key('lp', ino))
  local holder, r = conflict(all, sid .. '_' .. owner, ltype, b, e)
  if not holder then return { 0, 0 } end
  local pid = starts(holder, sid .. '_') and r[4] or 0
  return { 0, r[1], string.format('%d', r[2]), string.format('%d', r[3]), pid }
end

local function setlk(args)
  local sid, ino, owner, ltype, b, e, pid = args[1], tonumber(args[2]), args[3], tonumber(args[4]),
    tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  must_attr(ino)
  local hk, me = key('lp', ino), sid .. '_' .. owner
  local all = redis.call('HGETALL', hk)
  if ltype ~= 0 and conflict(all, me, ltype, b, e) then fail(EAGAIN) end
  -- Carve [b, e] out of this holder's ranges, then add the new range.
  local mine = parse_ranges(redis.call('HGET', hk, me) or '')
  local nxt = {}
  for _, r in ipairs(mine) do
    if r[3] < b or r[2] > e then
      nxt[#nxt + 1] = r
    else
      if r[2] < b then nxt[#nxt + 1] = { r[1], r[2], b - 1, r[4] } end
      if r[3] > e then nxt[#nxt + 1] = { r[1], e + 1, r[3], r[4] } end
    end
  end
  if ltype ~= 0 then
    nxt[#nxt + 1] = { ltype, b, e, pid }
    redis.call('SADD', 'sl' .. sid, string.format('%d', ino))
  end
  if #nxt == 0 then redis.call('HDEL', hk, me) else redis.call('HSET', hk, me, format_ranges(nxt)) end
  return { 0 }
end

-- ---------------------------------------------------------------- sessions, cleanup

-- Releases inodes this session sustained: those without links go.
local function release(args)
  local sid = args[1]
  local deleted = 0
  for i = 2, #args do
    local ino = tonumber(args[i])
    if redis.call('SREM', 'ss' .. sid, string.format('%d', ino)) == 1 then
      local a = get_attr(ino)
      if a and a.nlink == 0 then
        delete_inode(ino, a)
        deleted = deleted + 1
      end
    end
  end
  return { 0, deleted }
end

-- The session's heartbeat; ESTALE when the session is gone (cleaned by
-- another client after a timeout): the caller must start a new one. RECORD,
-- when given, replaces the session's record (its load changed).
local function heartbeat(args)
  local sid, now, record = args[1], args[2], args[3]
  live_session(sid)
  redis.call('ZADD', 'heartbeat', now, sid)
  if record then redis.call('HSET', 'sessions', sid, record) end
  return { 0 }
end

-- One client at a time runs a background job (meta.h, ClaimJob): claims job
-- NAME when no client did in the last INTERVAL seconds. { 0, 1 } claimed.
local function claim_job(args)
  local k, now, interval = 'job_' .. args[1], tonumber(args[2]), tonumber(args[3])
  local last = redis.call('GET', k)
  if last and now - tonumber(last) < interval then return { 0, 0 } end
  redis.call('SET', k, now)
  return { 0, last and 1 or 0 }
end

-- Meta::BeginBackup (args[1] 'begin') and EndBackup ('end'); args[2]: now,
-- args[3]: after how long dumps still counted as running have died.
-- Counters as in KvMeta: backupsRunning, backupBegan, backupSliceMark.
local function backup_mark(args)
  local now, give_up = tonumber(args[2]), tonumber(args[3])
  local running = math.max(tonumber(redis.call('GET', 'backupsRunning') or '0'), 0)
  if args[1] == 'begin' then
    redis.call('SET', 'backupsRunning', running + 1)
    redis.call('SET', 'backupBegan', now)
    redis.call('SET', 'backupSliceMark', '9223372036854775807')
    return { 0 }
  end
  running = math.max(running - 1, 0)
  local began = tonumber(redis.call('GET', 'backupBegan') or '0')
  if running > 0 and now - began > give_up then running = 0 end
  redis.call('SET', 'backupsRunning', running)
  if running == 0 then redis.call('SET', 'backupSliceMark', redis.call('GET', 'nextSlice') or '0') end
  return { 0 }
end

-- Removes a session: its sustained inodes are released, its locks dropped.
local function clean_session(args)
  local sid = args[1]
  for _, s in ipairs(redis.call('SMEMBERS', 'ss' .. sid)) do
    local ino = tonumber(s)
    local a = get_attr(ino)
    if a and a.nlink == 0 then delete_inode(ino, a) end
  end
  local prefix = sid .. '_'
  for _, s in ipairs(redis.call('SMEMBERS', 'sl' .. sid)) do
    local ino = tonumber(s)
    for _, hk in ipairs({ key('lf', ino), key('lp', ino) }) do
      for _, f in ipairs(redis.call('HKEYS', hk)) do
        if starts(f, prefix) then redis.call('HDEL', hk, f) end
      end
    end
  end
  local w = redis.call('HGETALL', 'watchers')
  for j = 1, #w, 2 do
    if w[j + 1] == sid then redis.call('HDEL', 'watchers', w[j]) end
  end
  redis.call('DEL', 'ss' .. sid, 'sl' .. sid)
  redis.call('HDEL', 'sessions', sid)
  redis.call('ZREM', 'heartbeat', sid)
  return { 0 }
end

-- Moves the chunks of deleted inodes into the slice queue, at most
-- max_chunks of them per call. Returns how many inodes were finished and how
-- many are left.
local function reclaim(args)
  local budget, max_inodes = tonumber(args[1]), tonumber(args[2])
  local finished = 0
  for _, s in ipairs(redis.call('ZRANGE', 'delinodes', 0, max_inodes - 1)) do
    local ino = tonumber(s)
    local idxs = redis.call('ZRANGE', key('k', ino), 0, budget - 1)
    for _, i in ipairs(idxs) do drop_chunk(ino, tonumber(i)) end
    budget = budget - #idxs
    if redis.call('EXISTS', key('k', ino)) == 1 then break end
    redis.call('ZREM', 'delinodes', s)
    finished = finished + 1
    if budget <= 0 then break end
  end
  return { 0, finished, redis.call('ZCARD', 'delinodes') }
end

-- ---------------------------------------------------------------- dump / load

-- Everything stored for some inodes, read atomically (tessera dump):
-- { 0, rec, rec, ... }, one rec per inode asked for: { attr, symlink target,
-- {xattr name, value, ...}, {chunk index, ...}, {slice list, ...} } (indexes
-- ascending, lists in the same order), or { false } for an inode that does
-- not exist.
local function dump_inodes(args)
  local out = { 0 }
  for _, arg in ipairs(args) do
    local ino = tonumber(arg)
    local a = redis.call('GET', key('i', ino))
    if not a then
      out[#out + 1] = { false }
    else
      local target = redis.call('GET', key('s', ino)) or ''
      local xattrs = redis.call('HGETALL', key('x', ino))
      local idx = redis.call('ZRANGEBYSCORE', key('k', ino), '-inf', '+inf')
      local lists = {}
      for from = 1, #idx, 1000 do -- unpack has a stack limit: MGET in slices
        local ks = {}
        for i = from, math.min(#idx, from + 999) do ks[#ks + 1] = chunk_key(ino, tonumber(idx[i])) end
        for _, v in ipairs(redis.call('MGET', unpack(ks))) do lists[#lists + 1] = v or '' end
      end
      out[#out + 1] = { a, target, xattrs, idx, lists }
    end
  end
  return out
end

-- Writes a batch of records as they are (tessera load, into an empty
-- database): a sequence of tagged records
--   i ino attr | s ino target | x ino name value | c ino idx list |
--   e parent name entry | n counter value | setting json |
--   u dir length space entries | p ino n (parent names)*n |
--   de parent name (fsck --repair: removes an entry)
-- The statistics of directories args[1..]: l, s, i for each (0 when absent).
local function dir_stats(args)
  local out = {}
  for _, d in ipairs(args) do
    local v = redis.call('HMGET', 'u' .. d, 'l', 's', 'i')
    out[#out + 1] = tonumber(v[1] or '0')
    out[#out + 1] = tonumber(v[2] or '0')
    out[#out + 1] = tonumber(v[3] or '0')
  end
  return { 0, out }
end

-- Copies SRC to PARENT/NAME by metadata only (meta.h, Meta::Clone): the
-- copies' chunk lists name the same slices, each one more reference in
-- 'slicerefs'. Checks everything before the first write.
-- args: ctx(3) now(2) src parent name cumask preserve capacity inode_limit max
-- { 0, first_ino, attr, entries }
local function clone(args)
  local c, now = context(args, 1), now_of(args, 4)
  local src, parent, name = tonumber(args[6]), tonumber(args[7]), args[8]
  local cumask, preserve = tonumber(args[9]), args[10] == '1'
  local capacity, inode_limit, max = tonumber(args[11]), tonumber(args[12]), tonumber(args[13])
  local p = writable_dir(c, parent)
  if get_entry(parent, name) then fail(EEXIST) end
  local items = { { src = src, parent = 0, name = name, attr = must_attr(src), subdirs = 0 } }
  if is_dir(items[1].attr) then -- not into itself
    local q = parent
    for _ = 1, 100000 do
      if q == src then fail(EINVAL) end
      if q == ROOT then break end
      q = must_attr(q).parent
    end
  end
  local i = 1
  while i <= #items do
    local it = items[i]
    local a = it.attr
    if not is_symlink(a) then require_permission(c, a, is_dir(a) and R_OK + X_OK or R_OK) end
    local t = band(a.mode, S_IFMT)
    if c.uid ~= 0 and (t == 8192 or t == 24576) then fail(EPERM) end -- device nodes: root only
    if is_dir(a) then
      local d = redis.call('HGETALL', key('d', it.src))
      for j = 1, #d, 2 do
        local _, cino = struct.unpack('>BI8', d[j + 1])
        if cino < TRASH then
          if #items >= max then fail(E2BIG) end
          local ca = must_attr(cino)
          if is_dir(ca) then it.subdirs = it.subdirs + 1 end
          items[#items + 1] = { src = cino, parent = i, name = d[j], attr = ca, subdirs = 0 }
        end
      end
    end
    i = i + 1
  end
  local space = 0
  for _, it in ipairs(items) do
    if is_file(it.attr) then space = space + align4k(it.attr.length) end
  end
  if capacity > 0 and space > 0 and counter('usedSpace') + space > capacity then fail(ENOSPC) end
  if inode_limit > 0 and counter('totalInodes') + #items > inode_limit then fail(ENOSPC) end
  local first = redis.call('INCRBY', 'nextInode', #items) - #items + 1
  for k, it in ipairs(items) do
    local nino = first + k - 1
    local np = it.parent == 0 and parent or first + it.parent - 1
    local a = it.attr
    a.parent = np
    a.nlink = is_dir(a) and 2 + it.subdirs or 1
    set_ctime(a, now)
    if not preserve then
      a.uid, a.gid = c.uid, c.gid
      if not is_symlink(a) then
        a.mode = band(a.mode, S_IFMT) + band(band(a.mode, 4095), bnot(bor(cumask, S_ISUID + S_ISGID)))
      end
      a.asec, a.ansec, a.msec, a.mnsec = now[1], now[2], now[1], now[2]
    end
    put_attr(nino, a)
    put_entry(np, it.name, nino, a.mode)
    charge_entry(np, a, 1)
    if is_symlink(a) then redis.call('SET', key('s', nino), redis.call('GET', key('s', it.src)) or '') end
    local x = redis.call('HGETALL', key('x', it.src))
    for j = 1, #x, 2 do -- privileges do not pass to a copy the caller owns
      if preserve or (x[j] ~= 'security.capability' and string.sub(x[j], 1, 8) ~= 'trusted.') then
        redis.call('HSET', key('x', nino), x[j], x[j + 1])
      end
    end
    for _, s in ipairs(redis.call('ZRANGE', key('k', it.src), 0, -1)) do
      local idx = tonumber(s)
      local v = redis.call('GET', chunk_key(it.src, idx))
      if v then
        redis.call('SET', chunk_key(nino, idx), v)
        redis.call('ZADD', key('k', nino), idx, idx)
        local seen = {}
        for pos = 1, #v - 23, 24 do
          local _, id, size = struct.unpack(SLICE, v, pos)
          if id ~= 0 and not seen[id] then
            seen[id] = true
            redis.call('HINCRBY', 'slicerefs', string.format('%d_%d', id, size), 1)
          end
        end
      end
    end
  end
  if is_dir(items[1].attr) then p.nlink = p.nlink + 1 end
  set_mtime(p, now)
  put_attr(parent, p)
  incr('totalInodes', #items)
  incr('usedSpace', space)
  return { 0, first, redis.call('GET', key('i', first)), #items, encode_attr(p) }
end

-- Quotas (meta.h, docs/format.md "Quotas"): hash 'Q<kind>_<id>' with
-- ms, mi (limits), us, ui (usage); set 'quotas' names them.
-- quota_set KIND ID MS MI US UI WITH_USAGE
local function quota_set(args)
  local k = 'Q' .. args[1] .. '_' .. args[2]
  redis.call('HSET', k, 'ms', args[3], 'mi', args[4])
  if args[7] == '1' or redis.call('HEXISTS', k, 'us') == 0 then
    redis.call('HSET', k, 'us', args[5], 'ui', args[6])
  end
  redis.call('SADD', 'quotas', args[1] .. '_' .. args[2])
  return { 0 }
end

local function quota_delete(args)
  local k = 'Q' .. args[1] .. '_' .. args[2]
  if redis.call('DEL', k) == 0 then return { ENOENT } end
  redis.call('SREM', 'quotas', args[1] .. '_' .. args[2])
  return { 0 }
end

-- quota_add (KIND ID DSPACE DINODES)...: to the quotas that exist.
local function quota_add(args)
  for i = 1, #args, 4 do
    local k = 'Q' .. args[i] .. '_' .. args[i + 1]
    if redis.call('EXISTS', k) == 1 then
      redis.call('HINCRBY', k, 'us', args[i + 2])
      redis.call('HINCRBY', k, 'ui', args[i + 3])
    end
  end
  return { 0 }
end

-- { 0, { kind, id, ms, mi, us, ui, ... } }
local function quota_list(args)
  local out = {}
  for _, m in ipairs(redis.call('SMEMBERS', 'quotas')) do
    local v = redis.call('HMGET', 'Q' .. m, 'ms', 'mi', 'us', 'ui')
    local sep = string.find(m, '_', 1, true)
    if v[1] and sep then
      out[#out + 1] = tonumber(string.sub(m, 1, sep - 1))
      out[#out + 1] = string.sub(m, sep + 1)
      for j = 1, 4 do out[#out + 1] = v[j] or '0' end -- as stored: exact past 2^53
    end
  end
  return { 0, out }
end

local function load(args)
  local i = 1
  while i <= #args do
    local t = args[i]
    if t == 'i' then redis.call('SET', 'i' .. args[i + 1], args[i + 2]); i = i + 3
    elseif t == 's' then redis.call('SET', 's' .. args[i + 1], args[i + 2]); i = i + 3
    elseif t == 'x' then redis.call('HSET', 'x' .. args[i + 1], args[i + 2], args[i + 3]); i = i + 4
    elseif t == 'c' then
      redis.call('SET', 'c' .. args[i + 1] .. '_' .. args[i + 2], args[i + 3])
      redis.call('ZADD', 'k' .. args[i + 1], args[i + 2], args[i + 2])
      i = i + 4
    elseif t == 'e' then
      redis.call('HSET', 'd' .. args[i + 1], args[i + 2], args[i + 3])
      redis.call('ZADD', 'n' .. args[i + 1], 0, args[i + 2])
      i = i + 4
    elseif t == 'n' then redis.call('SET', args[i + 1], args[i + 2]); i = i + 3
    elseif t == 'de' then
      redis.call('HDEL', 'd' .. args[i + 1], args[i + 2])
      redis.call('ZREM', 'n' .. args[i + 1], args[i + 2])
      i = i + 3
    elseif t == 'setting' then redis.call('SET', 'setting', args[i + 1]); i = i + 2
    elseif t == 'u' then
      local k = 'u' .. args[i + 1]
      redis.call('DEL', k)
      if args[i + 2] ~= '0' or args[i + 3] ~= '0' or args[i + 4] ~= '0' then
        redis.call('HSET', k, 'l', args[i + 2], 's', args[i + 3], 'i', args[i + 4])
      end
      i = i + 5
    elseif t == 'p' then
      local k, n = 'p' .. args[i + 1], tonumber(args[i + 2])
      redis.call('DEL', k)
      for j = 1, n do redis.call('HSET', k, args[i + 1 + 2 * j], args[i + 2 + 2 * j]) end
      i = i + 3 + 2 * n
    elseif t == 'r' then
      if tonumber(args[i + 2]) > 0 then redis.call('HSET', 'slicerefs', args[i + 1], args[i + 2])
      else redis.call('HDEL', 'slicerefs', args[i + 1]) end
      i = i + 3
    elseif t == 'uq' then redis.call('ZREM', 'delslices', args[i + 1]); i = i + 2
    else fail(EINVAL) end
  end
  return { 0 }
end

-- Operation records (redis_client.h): a state-changing call comes with two
-- keys, its connection's record key and its sequence number there. If the
-- record already holds that sequence number, the call was performed before
-- (its reply was lost and this is the client's retry): the recorded reply is
-- the answer and nothing runs again. Otherwise the function runs and its
-- reply, an errno included, is recorded. A record outlives its connection
-- by OP_TTL_MS at most (a client retries for seconds, not hours).
local OP_TTL_MS = 3600000

-- Publishes the call's changes on the volume's channel ('watchchan') when a
-- client other than the caller watches (the 'watchers' hash: connection
-- prefix -> session). The caller is named by its connection prefix, the
-- operation record key up to its '.'.
local function publish(opkey)
  if #changes == 0 then return end
  local n = redis.call('HLEN', 'watchers')
  if n == 0 then return end
  local me = string.match(opkey or '', '^[^.]*%.') or ''
  if n == 1 and redis.call('HEXISTS', 'watchers', me) == 1 then return end
  local ch = redis.call('GET', 'watchchan')
  if not ch then return end
  local payload = me .. '\0' .. table.concat(changes, '\0')
  if #payload > 65536 then payload = me .. '\0*' end
  redis.call('PUBLISH', ch, payload)
end

local function wrap(fn, readonly)
  return function(keys, args)
    changes = {}
    local opkey, seq
    if not readonly then
      opkey, seq = keys[1], keys[2]
      if not opkey or not seq then return redis.error_reply('ERR tessera: a state-changing call needs an operation id') end
      local prev = redis.call('GET', opkey)
      if prev then
        local rec = cmsgpack.unpack(prev)
        if rec[1] == seq then return rec[2] end
      end
    end
    local ok, res = pcall(fn, args)
    if not ok then
      if type(res) ~= 'table' or not res.tessera_errno then error(res) end
      res = { res.tessera_errno }
    end
    if not readonly then
      redis.call('SET', opkey, cmsgpack.pack({ seq, res }), 'PX', OP_TTL_MS)
      publish(opkey)
    end
    return res
  end
end

local function register(name, fn, readonly)
  redis.register_function({
    function_name = 'tessera_' .. name,
    callback = wrap(fn, readonly),
    flags = readonly and { 'no-writes' } or {},
  })
end

register('lookup', lookup, true)
register('mknod', mknod)
register('unlink', unlink)
register('rmdir', rmdir)
register('rename', rename)
register('link', link)
register('readdir', readdir, true)
register('setattr', setattr)
register('truncate', truncate)
register('fallocate', fallocate)
register('write', write)
register('compact', compact)
register('backup_mark', backup_mark)
register('getxattr', getxattr, true)
register('setxattr', setxattr)
register('listxattr', listxattr, true)
register('removexattr', removexattr)
register('flock', flock)
register('getlk', getlk, true)
register('setlk', setlk)
register('release', release)
register('clean_session', clean_session)
register('heartbeat', heartbeat)
register('claim_job', claim_job)
register('ensure_trash', ensure_trash)
register('reclaim', reclaim)
register('dump_inodes', dump_inodes, true)
register('load', load)
register('dir_stats', dir_stats, true)
register('clone', clone)
register('quota_set', quota_set)
register('quota_delete', quota_delete)
register('quota_add', quota_add)
register('quota_list', quota_list, true)
