// KvMeta: extended attributes and locks (BSD flock, POSIX record locks).
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/log.h"
#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"
#include "meta/meta_util.h"

namespace tessera::meta {

using chunk::kChunkSize;
using chunk::Slice;
using namespace keys;  // NOLINT

// ---------------------------------------------------------------- xattrs

namespace {
// "user." attributes are only for regular files and directories (elsewhere
// reading finds none, ENODATA, and writing is refused, EPERM, as in Linux's
// xattr_permission); reading needs read permission, changing needs write
// permission (or ownership for the "trusted."/"security." namespaces, which
// need root).
Status XattrAccess(const Context& ctx, const Attr& attr, const std::string& name, int mask) {
  if (name.rfind("user.", 0) == 0) {
    if (!attr.IsFile() && !attr.IsDir()) return Status::Err((mask & W_OK) ? EPERM : ENODATA);
    return CheckPermission(ctx, attr, mask);
  }
  if (name.rfind("trusted.", 0) == 0) return ctx.IsRoot() ? Status::OK() : Status::Err(EPERM);
  if (name.rfind("security.", 0) == 0 || name.rfind("system.", 0) == 0) {
    if (mask & W_OK) return (ctx.IsRoot() || ctx.uid == attr.uid) ? Status::OK() : Status::Err(EPERM);
    return Status::OK();
  }
  return Status::Err(EOPNOTSUPP);
}
}  // namespace

Status KvMeta::GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) {
  RETURN_IF_ERROR(CheckXattrName(name));
  return engine_->Run(
      [&](kv::Txn& tx) {
        Attr attr;
        RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
        RETURN_IF_ERROR(XattrAccess(ctx, attr, name, R_OK));
        auto v = tx.Get(XattrKey(ino, name));
        if (!v.ok()) return v.status().not_found() ? Status::Err(ENODATA) : v.status();
        *value = std::move(*v);
        return Status::OK();
      },
      true);
}

Status KvMeta::SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) {
  RETURN_IF_ERROR(CheckXattrName(name));
  if (value.size() > XATTR_SIZE_MAX) return Status::Err(E2BIG);
  if (flags & ~(XATTR_CREATE | XATTR_REPLACE)) return Status::Err(EINVAL);
  Timespec now = Now();
  return engine_->Run([&](kv::Txn& tx) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    RETURN_IF_ERROR(XattrAccess(ctx, attr, name, W_OK));
    std::string key = XattrKey(ino, name);
    auto v = tx.Get(key);
    if (!v.ok() && !v.status().not_found()) return v.status();
    if (v.ok() && (flags & XATTR_CREATE)) return Status::Err(EEXIST);
    if (!v.ok() && (flags & XATTR_REPLACE)) return Status::Err(ENODATA);
    RETURN_IF_ERROR(tx.Put(key, value));
    attr.ctime = now;
    return PutAttrTx(tx, ino, attr);
  });
}

Status KvMeta::ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        names->clear();
        Attr attr;
        RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
        std::string prefix = XattrPrefix(ino);
        return tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view) {
          names->emplace_back(k.substr(prefix.size()));
          return true;
        });
      },
      true);
}

Status KvMeta::RemoveXattr(const Context& ctx, Ino ino, const std::string& name) {
  RETURN_IF_ERROR(CheckXattrName(name));
  Timespec now = Now();
  return engine_->Run([&](kv::Txn& tx) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    RETURN_IF_ERROR(XattrAccess(ctx, attr, name, W_OK));
    std::string key = XattrKey(ino, name);
    auto v = tx.Get(key);
    if (!v.ok()) return v.status().not_found() ? Status::Err(ENODATA) : v.status();
    RETURN_IF_ERROR(tx.Delete(key));
    attr.ctime = now;
    return PutAttrTx(tx, ino, attr);
  });
}

// ---------------------------------------------------------------- locks

Status KvMeta::Flock(const Context& ctx, Ino ino, uint64_t owner, LockType type) {
  return engine_->Run([&](kv::Txn& tx) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    auto v = tx.Get(FlockKey(ino));
    std::vector<LockRecord> locks;
    if (v.ok()) locks = DecodeLocks(*v);
    else if (!v.status().not_found()) return v.status();
    std::erase_if(locks, [&](const LockRecord& l) { return l.sid == sid_ && l.owner == owner && type == kUnlock; });
    if (type != kUnlock) {
      for (const auto& l : locks) {
        if (l.sid == sid_ && l.owner == owner) continue;
        if (type == kWriteLock || l.type == kWriteLock) return Status::Err(EAGAIN);
      }
      std::erase_if(locks, [&](const LockRecord& l) { return l.sid == sid_ && l.owner == owner; });
      locks.push_back(LockRecord{sid_, owner, type, 0, UINT64_MAX, ctx.pid});
      RETURN_IF_ERROR(tx.Put(SessionLockKey(sid_, ino), ""));
    }
    if (locks.empty()) return tx.Delete(FlockKey(ino));
    return tx.Put(FlockKey(ino), EncodeLocks(locks));
  });
}

Status KvMeta::GetLk(const Context& ctx, Ino ino, uint64_t owner, PosixLock* lock) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        auto v = tx.Get(PlockKey(ino));
        PosixLock want = *lock;
        lock->type = kUnlock;
        if (!v.ok()) return v.status().not_found() ? Status::OK() : v.status();
        for (const auto& l : DecodeLocks(*v)) {
          if (l.sid == sid_ && l.owner == owner) continue;
          bool overlap = l.start <= want.end && want.start <= l.end;
          if (overlap && (want.type == kWriteLock || l.type == kWriteLock)) {
            *lock = PosixLock{LockType(l.type), l.start, l.end, l.sid == sid_ ? l.pid : 0};
            return Status::OK();
          }
        }
        return Status::OK();
      },
      true);
}

Status KvMeta::SetLk(const Context& ctx, Ino ino, uint64_t owner, const PosixLock& lock) {
  if (lock.start > lock.end) return Status::Err(EINVAL);
  return engine_->Run([&](kv::Txn& tx) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    auto v = tx.Get(PlockKey(ino));
    std::vector<LockRecord> locks;
    if (v.ok()) locks = DecodeLocks(*v);
    else if (!v.status().not_found()) return v.status();
    if (lock.type != kUnlock) {
      for (const auto& l : locks) {
        if (l.sid == sid_ && l.owner == owner) continue;
        bool overlap = l.start <= lock.end && lock.start <= l.end;
        if (overlap && (lock.type == kWriteLock || l.type == kWriteLock)) return Status::Err(EAGAIN);
      }
    }
    // Carve [start, end] out of this owner's ranges, then add the new range.
    std::vector<LockRecord> next;
    for (const auto& l : locks) {
      bool mine = l.sid == sid_ && l.owner == owner;
      if (!mine || l.end < lock.start || l.start > lock.end) {
        next.push_back(l);
        continue;
      }
      if (l.start < lock.start) {
        LockRecord left = l;
        left.end = lock.start - 1;
        next.push_back(left);
      }
      if (l.end > lock.end) {
        LockRecord right = l;
        right.start = lock.end + 1;
        next.push_back(right);
      }
    }
    if (lock.type != kUnlock) {
      next.push_back(LockRecord{sid_, owner, lock.type, lock.start, lock.end, lock.pid});
      RETURN_IF_ERROR(tx.Put(SessionLockKey(sid_, ino), ""));
    }
    if (next.empty()) return tx.Delete(PlockKey(ino));
    return tx.Put(PlockKey(ino), EncodeLocks(next));
  });
}

}  // namespace tessera::meta
