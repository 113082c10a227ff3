// tessera gc: finds objects in the bucket that no metadata references (leaked
// by crashed clients, failed writes whose commit outcome was unknown, ...)
// and, with --delete, removes those older than an hour, and finishes the
// pending deletions of reclaimed slices.
//
// Safe beside live clients: the metadata is scanned first, then the bucket is
// listed, so an object of a slice committed in between looks leaked, but it
// is young; a client commits what it uploads within minutes (an open file
// commits within 5 minutes of its oldest uncommitted write, whether its
// writer goes on or pauses: docs/consistency.md), so only objects older than
// an hour are deleted.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "chunk/chunk_store.h"
#include "chunk/compression.h"
#include "chunk/layout.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/url.h"
#include "vfs/compactor.h"
#include "vfs/trash.h"

namespace tessera::cli {

namespace {

constexpr int64_t kMinLeakAgeSec = 3600;

struct Count {
  uint64_t objects = 0;
  uint64_t bytes = 0;
  void Add(uint64_t size) {
    ++objects;
    bytes += size;
  }
  std::string Text() const { return fmt::format("{} object(s), {}", objects, HumanSize(bytes)); }
};

// gc --compact: every chunk of two slices or more is rewritten as one; the
// slices it replaces go to the deletion queue (finished by --delete). A
// chunk a client changes meanwhile is left for later (EAGAIN); one whose
// objects cannot be read is named on stderr and counted in *unreadable.
Status CompactAll(Volume* vol, uint64_t* unreadable) {
  chunk::StoreConfig sc;
  sc.block_size = vol->format.block_size;
  ASSIGN_OR_RETURN(sc.compression, chunk::ParseCompression(vol->format.compression));
  sc.mem_cache_bytes = 0;
  chunk::ChunkStore store(vol->store.get(), sc);
  Progress progress;
  uint64_t files = 0, chunks = 0, compacted = 0, busy = 0, before = 0, after = 0;
  std::unordered_set<meta::Ino> seen;  // a file of several links, once
  RETURN_IF_ERROR(WalkFiles(vol->meta.get(), "/", meta::kRootIno,
                            [&](const std::string& path, meta::Ino ino, const meta::Attr&) -> Status {
    if (!seen.insert(ino).second) return Status::OK();
    ++files;
    for (uint32_t from = 0;;) {
      std::vector<uint32_t> list;
      RETURN_IF_ERROR(vol->meta->ListChunks(ino, from, 1024, &list));
      for (uint32_t index : list) {
        ++chunks;
        vfs::CompactResult r;
        Status st = vfs::CompactChunk(vol->meta.get(), &store, ino, index, 2, &r);
        if (st.code() == EAGAIN || st.code() == ENOENT) {  // changed or removed meanwhile
          ++busy;
          continue;
        }
        if (st.code() == EIO) {  // a missing or damaged object: the file is broken, the rest goes on
          ++*unreadable;
          std::fprintf(stderr, "tessera: cannot compact chunk %u of %s: %s\n", index, path.c_str(), st.ToString().c_str());
          continue;
        }
        RETURN_IF_ERROR(st.With(fmt::format("compacting chunk {} of {}", index, path)));
        if (r.changed) {
          ++compacted;
          before += r.slices_before;
          after += r.slices_after;
        }
      }
      if (list.empty() || list.back() == UINT32_MAX) break;
      from = list.back() + 1;
    }
    progress.Show(fmt::format("compacting: {} file(s), {} chunk(s) seen, {} compacted", files, chunks, compacted));
    return Status::OK();
  }));
  progress.Done();
  std::printf("compacted %llu of %llu chunk(s) in %llu file(s): slices %llu -> %llu%s\n", (unsigned long long)compacted,
              (unsigned long long)chunks, (unsigned long long)files, (unsigned long long)before,
              (unsigned long long)after,
              busy ? fmt::format(" ({} changed meanwhile: left for later)", busy).c_str() : "");
  return Status::OK();
}

}  // namespace

int Gc(const GcOptions& o) {
  auto vol = OpenVolume(o.meta_url);
  if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
  if (Status usable = CheckBucket(*vol); !usable.ok()) return Fail(usable.message() + "; nothing changed");
  const uint32_t bs = vol->format.block_size;
  uint64_t unreadable = 0;
  if (o.compact) {
    Status st = CompactAll(&*vol, &unreadable);
    if (!st.ok()) return Fail(st.ToString());
  }
  // Said last, whatever else gc did.
  auto finish = [&](int rc) {
    if (unreadable == 0) return rc;
    return Fail(fmt::format("{} chunk(s) could not be compacted: objects they reference are missing or unreadable "
                            "('tessera fsck --check-objects' names the files)",
                            unreadable));
  };
  Progress progress;

  // 0. With --delete, the trash's expired hours go first (their data becomes
  // pending deletions, finished below).
  if (o.delete_leaked && vol->format.trash_days > 0) {
    auto purged = vfs::PurgeTrash(vol->meta.get(), vol->format.trash_days, std::time(nullptr));
    if (!purged.ok()) return Fail(purged.status().With("purging the expired trash").ToString());
    if (*purged > 0) std::printf("trash: %llu expired entr%s removed\n", (unsigned long long)*purged, *purged == 1 ? "y" : "ies");
  }

  // 1. What the metadata references, and what it has queued for deletion.
  std::unordered_map<uint64_t, uint32_t> referenced, pending;
  uint64_t visited = 0;
  Status st = vol->meta->ScanAllSlices([&](uint64_t id, uint32_t size, bool queued) {
    (queued ? pending : referenced)[id] = size;
    if (++visited % 4096 == 0) progress.Show(fmt::format("scanned {} slice records", visited));
  });
  if (!st.ok()) return Fail(st.With("scanning the metadata").ToString());
  progress.Show(fmt::format("scanned {} slice records", visited), true);
  progress.Done();

  // 2. Every object of the bucket, classified.
  const int64_t now = std::time(nullptr);
  Count all, valid, queued, leaked, young, foreign;
  std::vector<std::string> doomed;
  std::string after;
  for (;;) {
    std::vector<object::ObjectInfo> page;
    bool more = false;
    st = vol->store->List("chunks/", after, 1000, &page, &more);
    if (!st.ok()) return Fail(st.With("listing the bucket").ToString());
    for (const auto& obj : page) {
      all.Add(uint64_t(obj.size));
      uint64_t id = 0;
      uint32_t index = 0, len = 0;
      if (!chunk::ParseBlockKey(obj.key, &id, &index, &len)) {
        foreign.Add(uint64_t(obj.size));
        continue;
      }
      auto block_of = [&](const std::unordered_map<uint64_t, uint32_t>& slices) {
        auto it = slices.find(id);
        return it != slices.end() && index < chunk::BlockCount(it->second, bs) &&
               len == chunk::BlockLen(it->second, bs, index);
      };
      if (block_of(referenced)) {
        valid.Add(uint64_t(obj.size));
      } else if (block_of(pending)) {
        queued.Add(uint64_t(obj.size));
      } else if (now - obj.mtime_sec < kMinLeakAgeSec) {
        young.Add(uint64_t(obj.size));
      } else {
        leaked.Add(uint64_t(obj.size));
        if (o.delete_leaked) doomed.push_back(obj.key);
      }
    }
    progress.Show(fmt::format("listed {}", all.Text()));
    if (!more || page.empty()) break;
    after = page.back().key;
  }
  progress.Done();
  std::printf("volume %s: %s in the bucket\n", vol->format.name.c_str(), all.Text().c_str());
  std::printf("  referenced by files:      %s\n", valid.Text().c_str());
  std::printf("  pending deletion:         %s\n", queued.Text().c_str());
  std::printf("  leaked:                   %s\n", leaked.Text().c_str());
  std::printf("  unreferenced, under 1 h:  %s (kept: uploads whose commit may not have landed yet)\n",
              young.Text().c_str());
  if (foreign.objects) std::printf("  not Tessera blocks:       %s (left alone)\n", foreign.Text().c_str());
  if (!o.delete_leaked) {
    if (leaked.objects || queued.objects)
      std::fprintf(stderr, "tessera: run with --delete to remove the leaked objects and finish the pending deletions\n");
    return finish(0);
  }

  // 3. --delete: the leaked objects, then the deletion queue.
  std::atomic<uint64_t> deleted{0}, failed{0};
  std::mutex err_mu;
  std::string first_error;
  ParallelFor(doomed.size(), o.threads, [&](size_t i) {
    Status ds = vol->store->Delete(doomed[i]);
    if (ds.ok()) {
      deleted.fetch_add(1);
      return;
    }
    failed.fetch_add(1);
    std::lock_guard<std::mutex> g(err_mu);
    if (first_error.empty()) first_error = ds.ToString();
  });
  int finished = 0;
  for (;;) {
    auto r = vol->meta->CleanupDeleted(
        [&](uint64_t id, uint32_t size) {
          Status last;
          for (uint32_t i = 0, n = chunk::BlockCount(size, bs); i < n; ++i) {
            Status ds = vol->store->Delete(chunk::BlockKey(id, i, chunk::BlockLen(size, bs, i)));
            if (!ds.ok()) last = ds;
          }
          return last;
        },
        1000, size_t(std::max(o.threads, 1)));
    if (!r.ok()) return Fail(r.status().With("finishing the pending deletions").ToString());
    finished += *r;
    if (*r == 0) break;
  }
  std::printf("deleted %llu leaked object(s); finished the deletion of %d slice(s)\n",
              (unsigned long long)deleted.load(), finished);
  if (failed.load()) return Fail(fmt::format("{} object(s) could not be deleted: {}", failed.load(), first_error));
  return finish(0);
}

}  // namespace tessera::cli
