-- Tessera's Redis function library, part 3 of 3 (xattrs, locks, sessions,
-- cleanup, dump/load, the operation records and the registrations):
-- concatenated after redis_functions_ns.lua at build time (src/CMakeLists.txt).

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
  -- whole seconds: more than INTERVAL went by only once the difference exceeds it
  if last and now - tonumber(last) <= interval then return { 0, 0 } end
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
  if is_dir(items[1].attr) then count_subdir(parent, p, 1) end
  set_mtime(p, now)
  put_attr(parent, p)
  incr('totalInodes', #items)
  incr('usedSpace', space)
  redis.call('INCR', 'clones')
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

-- Writes records of a dump (tessera load) or of a repair (tessera fsck
-- --repair, on a mounted volume too): the attributes and entries it writes
-- are published like any call's (`wrap`), so other clients' caches follow.
local function load(args)
  local i = 1
  while i <= #args do
    local t = args[i]
    if t == 'i' then
      redis.call('SET', 'i' .. args[i + 1], args[i + 2])
      changed_inode(tonumber(args[i + 1]))
      i = i + 3
    elseif t == 's' then redis.call('SET', 's' .. args[i + 1], args[i + 2]); i = i + 3
    elseif t == 'x' then redis.call('HSET', 'x' .. args[i + 1], args[i + 2], args[i + 3]); i = i + 4
    elseif t == 'c' then
      redis.call('SET', 'c' .. args[i + 1] .. '_' .. args[i + 2], args[i + 3])
      redis.call('ZADD', 'k' .. args[i + 1], args[i + 2], args[i + 2])
      i = i + 4
    elseif t == 'e' then
      redis.call('HSET', 'd' .. args[i + 1], args[i + 2], args[i + 3])
      redis.call('ZADD', 'n' .. args[i + 1], 0, args[i + 2])
      changed_entry(tonumber(args[i + 1]), args[i + 2])
      i = i + 4
    elseif t == 'n' then redis.call('SET', args[i + 1], args[i + 2]); i = i + 3
    elseif t == 'de' then
      redis.call('HDEL', 'd' .. args[i + 1], args[i + 2])
      redis.call('ZREM', 'n' .. args[i + 1], args[i + 2])
      changed_entry(tonumber(args[i + 1]), args[i + 2])
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
-- keys, its connection's record key and its sequence number there, the
-- number prefixed with 'r' when the client sends the call again (its first
-- try's reply was lost). The record, "<number> <reply packed by cmsgpack>",
-- holds the last call run under its key, and the numbers under a key only
-- grow, so every call reads it first: a call with the recorded number was
-- performed before and the recorded reply is the answer, nothing runs again;
-- one with a smaller number is a stale copy, refused unrun. A stale copy is
-- not only a resend: the first try of a call whose connection the client
-- gave up on may still reach the server after the resend ran (the client's
-- kernel retransmits it once the network is back), and must not undo what
-- came after (an unlink of a name made again since). Otherwise the function
-- runs and its reply, an errno included, is recorded. A record outlives its
-- connection by OP_TTL_MS at most (a client retries for seconds, not hours).
local OP_TTL_MS = 3600000

-- Publishes the call's changes on the volume's channel ('watchchan') when a
-- client other than the caller watches (the 'watchers' hash: connection
-- prefix -> session). The caller is named by its connection prefix, the
-- operation record key up to its '.'.
local function publish(opkey)
  if #changes == 0 then return end
  -- One command for the common cases, no watcher or only the caller: up to
  -- two watchers' names.
  local w = redis.call('HRANDFIELD', 'watchers', 2)
  if #w == 0 then return end
  local me = string.match(opkey or '', '^[^.]*%.') or ''
  if #w == 1 and w[1] == me then return end
  local ch = redis.call('GET', 'watchchan')
  if not ch then return end
  local payload = me .. '\0' .. table.concat(changes, '\0')
  if #payload > 65536 then payload = me .. '\0*' end
  redis.call('PUBLISH', ch, payload)
end

-- A client's gathered statistics (stat_add), written about once a second:
-- args = client id, this flush's sequence number, the sequence number of a
-- flush whose outcome the client never heard of (0: none), how many of the
-- records are that flush's, then records of 4 (directory, length, space,
-- entries), the doubtful flush's first. Those are applied only if that flush
-- left no mark (it did not land): never lost, never counted twice. A
-- directory removed meanwhile is skipped (its record went with it).
local function flush_stats(args)
  local mark = 'V' .. args[1]
  local doubtful = tonumber(args[4])
  local landed = args[3] ~= '0' and redis.call('GET', mark) == args[3]
  local r = 0
  for i = 5, #args - 3, 4 do
    if not (landed and r < doubtful) then
      local raw = redis.call('GET', 'i' .. args[i])
      if raw and is_dir(decode_attr(raw)) then
        local k = 'u' .. args[i]
        if args[i + 1] ~= '0' then redis.call('HINCRBY', k, 'l', args[i + 1]) end
        if args[i + 2] ~= '0' then redis.call('HINCRBY', k, 's', args[i + 2]) end
        if args[i + 3] ~= '0' then redis.call('HINCRBY', k, 'i', args[i + 3]) end
      end
    end
    r = r + 1
  end
  redis.call('SET', mark, args[2], 'EX', 86400)
  return { 0 }
end

local function wrap(fn, readonly)
  return function(keys, args)
    changes = {}
    stat_deltas, stat_dirs = {}, {}
    local opkey, seq
    if not readonly then
      opkey, seq = keys[1], keys[2]
      if not opkey or not seq then return redis.error_reply('ERR tessera: a state-changing call needs an operation id') end
      if string.byte(seq, 1) == 114 then seq = string.sub(seq, 2) end -- 'r': a resend
      local n = tonumber(seq)
      if not n then return redis.error_reply('ERR tessera: a bad operation sequence number') end
      local prev = redis.call('GET', opkey)
      local digits = prev and string.match(prev, '^(%d+) ')
      if digits then
        local last = tonumber(digits)
        if n == last then return cmsgpack.unpack(string.sub(prev, #digits + 2)) end
        if n < last then
          return redis.error_reply('ERR tessera: operation ' .. seq .. ' on ' .. opkey .. ' is older than the last one there: not run')
        end
      end
    end
    local ok, res = pcall(fn, args)
    if not ok then
      if type(res) ~= 'table' or not res.tessera_errno then error(res) end
      res = { res.tessera_errno }
    end
    if not readonly then
      if res[1] == 0 then res[#res + 1] = encode_stat_deltas() end  -- always: the client strips it
      redis.call('SET', opkey, seq .. ' ' .. cmsgpack.pack(res), 'PX', OP_TTL_MS)
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
register('flush_stats', flush_stats)
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
