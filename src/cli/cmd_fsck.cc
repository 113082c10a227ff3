// tessera fsck: the engine's consistency check (Meta::Check) and, with
// --check-objects, whether every block the metadata references is in the
// bucket with its size: the files of the tree (or of --path) are walked, the
// blocks of every slice their chunks hold are checked with parallel HEADs,
// and each broken file is named by its path.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "chunk/layout.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/url.h"

namespace tessera::cli {

namespace {

using meta::Context;
using meta::Ino;

// One block to check, and the file it belongs to (index into `files`).
struct BlockCheck {
  std::string key;
  uint32_t len = 0;
  size_t file = 0;
};

struct BrokenFile {
  std::mutex mu;
  uint64_t bad = 0;          // guarded by mu
  std::string first_problem;  // guarded by mu
};

class ObjectChecker {
 public:
  ObjectChecker(Volume* vol, int threads) : vol_(vol), threads_(std::max(1, threads)) {}

  // Walks the tree under (path, ino); checks the blocks of every file.
  Status Run(const std::string& path, Ino ino) {
    RETURN_IF_ERROR(WalkFiles(vol_->meta.get(), path, ino,
                              [this](const std::string& p, Ino i, const meta::Attr& a) { return AddFile(p, i, a); }));
    RETURN_IF_ERROR(CheckBlocks());  // what is left
    progress_.Show(Text(), true);
    progress_.Done();
    return Status::OK();
  }

  uint64_t files() const { return paths_.size(); }
  uint64_t blocks() const { return checked_.load(); }
  // (path, problems, first problem) of each broken file, in walk order.
  std::vector<std::tuple<std::string, uint64_t, std::string>> Broken() const {
    std::vector<std::tuple<std::string, uint64_t, std::string>> out;
    for (size_t i = 0; i < paths_.size(); ++i)
      if (broken_[i]->bad > 0) out.emplace_back(paths_[i], broken_[i]->bad, broken_[i]->first_problem);
    return out;
  }

 private:
  static constexpr size_t kBatch = 4096;  // blocks queued before they are checked

  std::string Text() const { return fmt::format("checked {} block(s) of {} file(s)", checked_.load(), paths_.size()); }

  // Queues the blocks of every slice of the file (once per inode: hard links).
  Status AddFile(const std::string& path, Ino ino, const meta::Attr& attr) {
    if (!seen_.insert(ino).second || attr.length == 0) return Status::OK();
    const size_t file = paths_.size();
    paths_.push_back(path);
    broken_.push_back(std::make_unique<BrokenFile>());
    const uint32_t bs = vol_->format.block_size;
    for (uint32_t from = 0;;) {
      std::vector<uint32_t> chunks;
      RETURN_IF_ERROR(vol_->meta->ListChunks(ino, from, 1024, &chunks));
      if (chunks.empty()) break;
      for (uint32_t index : chunks) {
        std::vector<chunk::Slice> slices;
        RETURN_IF_ERROR(vol_->meta->Read(ino, index, &slices));
        std::unordered_set<uint64_t> ids;
        for (const auto& s : slices) {
          if (s.id == 0 || !ids.insert(s.id).second) continue;  // a hole, or listed twice
          for (uint32_t i = 0, n = chunk::BlockCount(s.size, bs); i < n; ++i) {
            const uint32_t len = chunk::BlockLen(s.size, bs, i);
            queue_.push_back({chunk::BlockKey(s.id, i, len), len, file});
          }
        }
        if (queue_.size() >= kBatch) RETURN_IF_ERROR(CheckBlocks());
      }
      from = chunks.back() + 1;
      if (chunks.back() == UINT32_MAX) break;
    }
    return Status::OK();
  }

  // HEADs every queued block on threads_ threads. A missing or short block
  // marks its file; an error of the store itself (unreachable, denied)
  // stops the check: it says nothing about the files.
  Status CheckBlocks() {
    std::mutex err_mu;
    Status store_error;
    std::atomic<bool> stop{false};
    ParallelFor(queue_.size(), threads_, [&](size_t i) {
      if (stop.load()) return;
      const BlockCheck& b = queue_[i];
      auto info = vol_->store->Head(b.key);
      std::string problem;
      if (!info.ok() && info.status().code() == ENOENT) {
        problem = "object " + b.key + " is missing";
      } else if (!info.ok()) {
        std::lock_guard<std::mutex> g(err_mu);
        if (store_error.ok()) store_error = info.status().With("checking object " + b.key);
        stop = true;
        return;
      } else if (uint64_t(info->size) != b.len && vol_->format.compression == "none") {
        problem = fmt::format("object {} has {} bytes, not {}", b.key, info->size, b.len);
      }
      checked_.fetch_add(1);
      if (!problem.empty()) {
        BrokenFile& f = *broken_[b.file];
        std::lock_guard<std::mutex> g(f.mu);
        if (f.bad++ == 0) f.first_problem = problem;
      }
    });
    queue_.clear();
    progress_.Show(Text());
    return store_error;
  }

  Volume* const vol_;
  const int threads_;
  Progress progress_;
  std::unordered_set<Ino> seen_;
  std::vector<std::string> paths_;                    // of each file checked
  std::vector<std::unique_ptr<BrokenFile>> broken_;  // parallel to paths_
  std::vector<BlockCheck> queue_;
  std::atomic<uint64_t> checked_{0};
};

}  // namespace

int Fsck(const FsckOptions& o) {
  auto vol = OpenVolume(o.meta_url);
  if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
  std::vector<std::string> problems;
  Status st;
  if (o.repair) {
    // Repairs read the whole tree, then write: no client may change it meanwhile.
    auto live = ListLiveSessions(vol->meta.get());
    if (!live.ok()) return Fail(live.status().ToString());
    if (*live > 0)
      return Fail(fmt::format("--repair needs the volume unmounted everywhere ({} client(s) have it); nothing changed",
                              *live));
    std::vector<std::string> changes;
    st = vol->meta->Repair(&changes);
    size_t made = 0;
    for (const auto& c : changes) {
      if (c.rfind("not repaired:", 0) == 0) {
        std::fprintf(stderr, "tessera: %s\n", c.c_str());
      } else {
        std::printf("repaired: %s\n", c.c_str());
        ++made;
      }
    }
    if (!st.ok()) return Fail(st.With(fmt::format("repairing (after {} change(s))", made)).ToString());
    std::fprintf(stderr, "tessera: %zu change(s) made\n", made);
  }
  st = vol->meta->Check(&problems);
  if (!st.ok()) return Fail(st.ToString());
  // Mounted clients write their directory statistics about once a second
  // (docs/format.md, §3c): a difference may be one not written yet. On Redis
  // the check reads the slices' records one after another, not as a
  // snapshot: a clone or compaction in between may look like a difference.
  // Such problems count only if they are still there a little later.
  auto may_lag = [](const std::string& p) {
    return p.find("statistics") != std::string::npos || p.starts_with("slice ") || p.starts_with("volume: ");
  };
  if (std::any_of(problems.begin(), problems.end(), may_lag)) {
    auto sessions = vol->meta->ListSessions();
    if (sessions.ok() && !sessions->empty()) {
      std::fprintf(stderr, "tessera: directory statistics or slice records differ while %zu client(s) have the "
                           "volume mounted: checking again in 3 s (they write theirs every second)\n",
                   sessions->size());
      std::this_thread::sleep_for(std::chrono::seconds(3));
      st = vol->meta->Check(&problems);
      if (!st.ok()) return Fail(st.ToString());
    }
  }
  // Statistics and usage counters a client lost in a crash (its last
  // second, docs/format.md §3c) are not damage to the tree: shown, not
  // counted as problems.
  std::vector<std::string> lagging;
  std::erase_if(problems, [&](const std::string& p) {
    if (p.find(": statistics (length/space/entries)") == std::string::npos && !p.starts_with("volume: ")) return false;
    lagging.push_back(p);
    return true;
  });
  for (const auto& p : lagging) std::printf("%s\n", p.c_str());
  if (!lagging.empty())
    std::fprintf(stderr,
                 "tessera: %zu directory statistics or usage counters are behind the tree (a client crashed before "
                 "writing its last second of them); the tree is not damaged: `tessera fsck --repair` recomputes them\n",
                 lagging.size());
  for (const auto& p : problems) std::printf("%s\n", p.c_str());
  if (!problems.empty()) return Fail(fmt::format("{} problem(s) found", problems.size()));
  std::fprintf(stderr, "tessera: metadata of volume '%s' is consistent\n", vol->format.name.c_str());
  if (!o.check_objects) return 0;

  if (Status usable = CheckBucket(*vol); !usable.ok()) return Fail(usable.message());
  const std::string path = o.path.empty() ? "/" : o.path;
  auto root = ResolvePath(vol->meta.get(), path);
  if (!root.ok()) return Fail(root.status().With("--path").ToString());
  ObjectChecker checker(&*vol, o.threads);
  st = checker.Run(path, *root);
  if (!st.ok()) return Fail(st.ToString());
  const auto broken = checker.Broken();
  for (const auto& [file, bad, first] : broken)
    std::printf("broken: %s: %llu bad block(s); %s\n", file.c_str(), (unsigned long long)bad, first.c_str());
  std::printf("checked %llu block(s) of %llu file(s) under %s: %zu broken file(s)\n",
              (unsigned long long)checker.blocks(), (unsigned long long)checker.files(), path.c_str(),
              broken.size());
  if (broken.empty()) return 0;
  return Fail(fmt::format(
      "{} file(s) reference objects that are missing or damaged (a client mounted with --writeback may still be "
      "uploading: see 'tessera status')",
      broken.size()));
}

}  // namespace tessera::cli
