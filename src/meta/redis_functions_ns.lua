-- Tessera's Redis function library, part 2 of 3 (namespace, attributes, data):
-- concatenated after redis_functions.lua at build time (src/CMakeLists.txt),
-- so the local functions defined there are in scope here.

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
  if ftype == S_IFDIR then count_subdir(parent, p, 1) end
  set_mtime(p, now)
  local praw = encode_attr(p)
  set_attr_raw(parent, praw)
  incr('totalInodes', 1)
  stat_add(parent, 0, 0, 1)
  return { 0, raw, praw }
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
  local praw = encode_attr(p)
  set_attr_raw(parent, praw)
  charge_entry(parent, a, -1)
  a.nlink = a.nlink - 1
  set_ctime(a, now)
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
  count_subdir(parent, p, -1)
  set_mtime(p, now)
  local praw = encode_attr(p)
  set_attr_raw(parent, praw)
  stat_add(parent, 0, 0, -1)
  a.nlink = 0
  set_ctime(a, now)
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
      if is_dir(sattr) then count_subdir(psrc, sp, -1); count_subdir(pdst, dp, 1) end
      if is_dir(dattr) then count_subdir(pdst, dp, -1); count_subdir(psrc, sp, 1) end
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
        count_subdir(pdst, dp, -1)
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
      count_subdir(psrc, sp, -1)
      count_subdir(pdst, dp, 1)
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
