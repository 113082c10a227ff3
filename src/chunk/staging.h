// Writeback staging (--writeback; docs/format.md, "Writeback staging packs").
// Blocks are acknowledged to writers once they are on the local cache disk,
// then uploaded to the object store in the background.
//
// On disk the staging area is a directory of append-only pack files, each a
// sequence of records (header, object key, block bytes). Many small blocks
// (a commit of random 4 KiB writes stages thousands) cost one write and one
// fdatasync, not one file and one fsync each. Sync() is a group commit: it
// makes every record appended before it durable, and concurrent callers
// share one fdatasync. A record whose block has been uploaded (or whose slice
// was deleted first) gets its magic overwritten with "done", and a pack whose
// records are all done is deleted once no more appends go to it.
//
// Uploads are retried with a doubling delay until they succeed: a staged
// block is never dropped. A pack left over by an earlier client (a crash, or
// an unmount without --flush) is scanned at Open and its live records are
// uploaded; a torn record at the end of a pack (a write cut short) was never
// acknowledged and is ignored.
//
// One process owns the directory at a time (flock on DIR/.lock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chunk/disk_cache.h"
#include "chunk/mem_cache.h"
#include "common/env.h"
#include "common/retry.h"
#include "common/status.h"

namespace tessera::chunk {

struct StagingOptions {
  // The staging directory (CACHE_DIR/UUID/rawstaging); created if needed.
  std::string dir;
  // Every file system call and the clock (tests give a FaultEnv); null =
  // Env::Posix().
  Env* env = nullptr;
  // Background upload workers (--max-uploads).
  size_t uploaders = 20;
  // Nice value of the upload workers (setpriority): background uploads
  // yield the CPU to the writers they acknowledged. 0 = unchanged. 19: the
  // CPU weight of a thread is ~1.25x per nice step, so 20 workers at nice 10
  // together still outweigh two writer threads; at 19 they take ~15% of a
  // busy machine and all of an idle one.
  int uploader_nice = 19;
  // A pack takes no more appends once it holds this many bytes.
  uint64_t pack_bytes = 64ull << 20;
  // Append fails with ENOSPC rather than leave less than this fraction of the
  // file system free (0 = no check); the caller then uploads directly.
  double free_space_ratio = 0.1;
  // Injectable for tests; default env->Space.
  std::function<Result<DiskSpace>(const std::string& dir)> disk_space;
  // A block is uploaded once it has been staged this long (--upload-delay):
  // a block whose slice is deleted meanwhile (overwritten and compacted, or
  // its file removed) is never uploaded. Blocks found at Open and blocks
  // waited for by Drain go at once.
  std::chrono::milliseconds upload_delay{0};
  // Pauses between tries of a failed upload (the retry policy's jittered
  // doubling, common/retry.h): from retry_initial up to retry_max. Unlike
  // other requests, a staged block's upload never gives up.
  std::chrono::milliseconds retry_initial{100};
  std::chrono::milliseconds retry_max{5000};
  // Uploads one block (required); called by the workers with verified bytes.
  std::function<Status(const std::string& key, const BlockRef& block)> upload;
  // Deletes the object of a block cancelled while its upload was in flight
  // (optional).
  std::function<Status(const std::string& key)> remove;
  // The block's bytes if they are still in memory, to skip reading them back
  // (optional; may return nullptr).
  std::function<BlockRef(const std::string& key)> cached;
};

// Thread-safe. Lock order: append_mu_ or sync_mu_ (never both), then mu_.
// Pack files are written under append_mu_ alone (appends are serial, so a
// torn record can only be the last one of a pack); what happens under mu_ is
// short (bookkeeping, the 4-byte "done" marks, creating or deleting a pack).
class StagingArea {
 public:
  struct Block {
    std::string key;        // object key (BlockKey)
    std::string_view data;  // the uncompressed block
  };
  struct Stats {
    uint64_t pending_blocks = 0;   // staged, not uploaded yet (in flight included)
    uint64_t pending_bytes = 0;    // their block bytes
    // How long the oldest block waiting for an upload worker has been
    // waiting since its --upload-delay ended (staged at this mount's start:
    // since then); 0 with none waiting.
    double oldest_wait_seconds = 0;
    uint64_t packs = 0;            // pack files in the directory
    uint64_t staged = 0;           // blocks appended since Open
    uint64_t recovered = 0;        // live blocks found at Open
    uint64_t uploaded = 0;         // uploads finished since Open
    uint64_t upload_failures = 0;  // failed upload attempts (each one retried)
    uint64_t cancelled = 0;        // blocks whose slice was deleted before their upload ended
    uint64_t lost = 0;             // staged blocks found corrupt: never uploaded
    uint64_t syncs = 0;            // fdatasync barriers done
  };

  // Creates and locks dir (EBUSY if another process holds it), deletes
  // leftover temporary files, scans the packs, then starts the workers, which
  // upload the blocks found right away.
  static Result<std::unique_ptr<StagingArea>> Open(StagingOptions opts);
  // Stops the workers after their current attempt. Blocks not uploaded yet
  // stay on disk for the next Open; packs with nothing left are deleted.
  ~StagingArea();
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;

  // Appends the blocks to the current pack and queues them for upload. They
  // are readable (Get) at once and survive a crash of this process; Sync
  // makes them survive a power loss too. A key already staged is skipped.
  // ENOSPC when the disk is too full, or the write error: nothing of the
  // batch is staged then.
  Status Append(const std::vector<Block>& blocks);
  // Makes every block appended before the call durable (fdatasync of the
  // packs written since the last Sync, fsync of the directory if a pack was
  // created). Cheap when nothing was appended.
  Status Sync();
  // The staged block (checksum verified), or nullptr if key is not staged
  // (never was, or uploaded or cancelled since). EIO if it is staged but
  // unreadable or corrupt: its data is lost.
  Result<BlockRef> Get(const std::string& key);
  bool Contains(const std::string& key) const;
  // The block's slice is gone: its upload is cancelled (an upload in flight
  // finishes, then its object is removed). No-op if key is not staged.
  void Cancel(const std::string& key);
  // Waits until every staged block is uploaded (or cancelled), calling
  // progress about once a second meanwhile, then deletes the packs. Blocks
  // appended meanwhile are waited for too.
  void Drain(const std::function<void(const Stats&)>& progress = {});

  Stats stats() const;
  const std::string& dir() const { return opts_.dir; }

 private:
  struct Pack {
    Env* env = nullptr;  // immutable
    uint64_t seq = 0;    // immutable
    std::string path;    // immutable
    int fd = -1;         // immutable; closed with the last reference
    uint64_t size = 0;   // guarded by mu_: bytes of complete records
    uint64_t live = 0;   // guarded by mu_: records not done yet
    bool open = false;   // guarded by mu_: takes appends (the current pack)
    bool gone = false;   // guarded by mu_: unlinked
    ~Pack();
  };
  struct Record {
    std::shared_ptr<Pack> pack;
    uint64_t offset = 0;  // of the record header in the pack
    uint32_t key_len = 0;
    uint32_t len = 0;     // block bytes
    uint64_t checksum = 0;
    bool in_flight = false;  // a worker is uploading it
    bool cancelled = false;  // its slice was deleted while in flight
  };
  enum class Outcome { kUploaded, kCancelled, kLost };

  StagingArea(StagingOptions opts, int lock_fd, int dir_fd);
  Status Scan();
  Status ScanPack(const std::string& path, uint64_t seq);
  void Work();
  // Reads and verifies the block of a record.
  Result<BlockRef> ReadRecord(const Pack& pack, uint64_t offset, uint32_t key_len, uint32_t len,
                              uint64_t checksum) const;
  // Marks the record done on disk and forgets it; deletes its pack if that
  // was the last live record of a closed pack.
  void FinishLocked(std::unordered_map<std::string, Record>::iterator it, Outcome outcome);
  void DropPackLocked(const std::shared_ptr<Pack>& pack);
  Result<std::shared_ptr<Pack>> NewPackLocked();

  const StagingOptions opts_;  // immutable
  Env* const env_;             // opts_.env
  const std::chrono::steady_clock::time_point started_;  // env_ clock
  const int lock_fd_;          // immutable; holds flock on dir/.lock
  const int dir_fd_;           // immutable; the directory, for fsync

  std::mutex append_mu_;  // serializes appends (the pack writes themselves)
  std::mutex sync_mu_;    // one Sync at a time; guards synced_gen_
  uint64_t synced_gen_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // queue_ grew, a record was cancelled, or stop_
  std::condition_variable idle_cv_;  // a record finished
  std::unordered_map<std::string, Record> records_;    // guarded by mu_: live records
  // guarded by mu_: keys to upload, oldest first, with the time their upload may start
  std::deque<std::pair<std::string, std::chrono::steady_clock::time_point>> queue_;  // env_ clock
  std::unordered_map<uint64_t, std::shared_ptr<Pack>> packs_;  // guarded by mu_: by seq
  std::shared_ptr<Pack> current_;                      // guarded by mu_: takes appends
  std::vector<std::shared_ptr<Pack>> dirty_;           // guarded by mu_: appended since the last Sync
  bool dir_dirty_ = false;     // guarded by mu_: a pack was created since the last Sync
  uint64_t appended_gen_ = 0;  // guarded by mu_: counts appends
  uint64_t next_seq_ = 1;      // guarded by mu_
  uint64_t pending_bytes_ = 0; // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  int draining_ = 0;           // guarded by mu_: Drain calls waiting (uploads ignore the delay)
  Stats counters_;             // guarded by mu_: the cumulative fields

  std::vector<std::thread> workers_;
};

}  // namespace tessera::chunk
