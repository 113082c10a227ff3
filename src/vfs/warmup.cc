// Vfs::Warmup (vfs.h): `tessera warmup`, run by the mount through its
// control channel (control.h), so that the cache it fills is the one its
// reads use.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "chunk/chunk_store.h"
#include "chunk/layout.h"
#include "vfs/vfs.h"

namespace tessera::vfs {

namespace {
constexpr size_t kPage = 256;
constexpr size_t kBatch = 64;  // blocks handed to the threads at a time
using Block = std::tuple<uint64_t, uint32_t, uint32_t>;  // slice id, index, length
}  // namespace

bool Vfs::DiskCacheOn() const { return store_->disk_cache() != nullptr; }

Status Vfs::Warmup(const Context& ctx, Ino top, WarmupMode mode, int threads,
                   const std::function<bool(const WarmupProgress&)>& progress, WarmupProgress* out) {
  *out = WarmupProgress{};
  const uint32_t block_size = store_->config().block_size;
  Status first;
  std::mutex mu;  // guards out and first while the threads run
  auto failed = [&](const Status& st) {
    out->failed++;
    if (first.ok()) first = st;
  };

  std::vector<Block> batch;
  auto run_batch = [&]() -> bool {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < batch.size();) {
        const auto& [id, index, len] = batch[i];
        bool cached = false;
        Status st;
        switch (mode) {
          case WarmupMode::kLoad: st = store_->Warm(id, index, len); break;
          case WarmupMode::kEvict: store_->Evict(id, index, len); break;
          case WarmupMode::kCheck: cached = store_->Cached(id, index, len); break;
        }
        std::lock_guard<std::mutex> g(mu);
        out->blocks++;
        out->bytes += len;
        if (cached) {
          out->cached_blocks++;
          out->cached_bytes += len;
        }
        if (!st.ok()) failed(st.With(fmt::format("loading block {} of slice {}", index, id)));
      }
    };
    std::vector<std::thread> pool;
    const int n = std::clamp<int>(threads, 1, int(batch.size()));
    for (int t = 1; t < n; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    batch.clear();
    return progress(*out);
  };

  // One file's blocks (each once), in batches.
  auto file = [&](Ino ino, const Attr& attr, const std::string& path) -> bool {
    Status perm = meta::CheckPermission(ctx, attr, R_OK);
    if (!perm.ok()) {
      failed(perm.With(path));
      return true;
    }
    out->files++;
    std::set<Block> seen;
    const uint32_t chunks = uint32_t((attr.length + chunk::kChunkSize - 1) / chunk::kChunkSize);
    std::vector<chunk::Slice> slices;
    for (uint32_t c = 0; c < chunks; ++c) {
      Status st = meta_->Read(ino, c, &slices);
      if (!st.ok()) {
        if (!st.not_found()) failed(st.With(path));
        return true;
      }
      for (const chunk::Slice& v : chunk::BuildView(slices)) {
        if (v.id == 0 || v.len == 0) continue;
        for (uint32_t b = v.off / block_size; b <= (v.off + v.len - 1) / block_size; ++b) {
          Block blk{v.id, b, chunk::BlockLen(v.size, block_size, b)};
          if (!seen.insert(blk).second) continue;
          batch.push_back(blk);
          if (batch.size() >= kBatch && !run_batch()) return false;
        }
      }
    }
    return true;
  };

  Attr attr;
  RETURN_IF_ERROR(meta_->GetAttr(ctx, top, &attr));
  if (!attr.IsDir()) {
    if (attr.IsFile() && !file(top, attr, "")) return Status::Err(ECANCELED, "stopped");
  } else {
    struct Frame {
      Ino dir;
      std::string path;
      std::string after;
    };
    std::vector<Frame> stack{Frame{top, "", ""}};
    std::vector<meta::Entry> page;
    while (!stack.empty()) {
      Frame& f = stack.back();
      bool more = false;
      Status st = meta_->ReaddirPage(ctx, f.dir, true, f.after, kPage, &page, &more);
      if (!st.ok()) {
        failed(st.With(f.path.empty() ? "/" : f.path));
        stack.pop_back();
        continue;
      }
      bool descended = false;
      for (const auto& e : page) {
        f.after = e.name;
        const std::string path = f.path.empty() ? e.name : f.path + "/" + e.name;
        if (e.attr.IsDir()) {
          stack.push_back(Frame{e.ino, path, ""});  // f is invalid from here
          descended = true;
          break;
        }
        if (e.attr.IsFile() && !file(e.ino, e.attr, path)) return Status::Err(ECANCELED, "stopped");
      }
      if (descended || more) continue;
      stack.pop_back();
    }
  }
  if (!batch.empty() && !run_batch()) return Status::Err(ECANCELED, "stopped");
  if (mode == WarmupMode::kLoad) store_->WaitForCacheWrites();  // on disk when the caller hears "done"
  (void)progress(*out);
  return first;
}

}  // namespace tessera::vfs
