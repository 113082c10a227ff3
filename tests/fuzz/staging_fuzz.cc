// The writeback staging pack scanner (chunk::StagingArea::Open): the input is
// written as a pack file left over by an earlier client into a fresh staging
// directory, which is then opened and drained with an upload function that
// only records what it is given.
//
// Input: one flag byte, then the pack's bytes. Flags:
//   bit 0  fix each record's header checksum as the scanner walks (else
//          records only count if the input got it right)
//   bit 1  fix each record's data checksum (bit 2: only of even records), so
//          that both good and corrupt blocks are found
//   bit 3  also write a second copy of the pack, a later one (every block
//          staged twice: the first copy counts, the second pack is dropped)
//   bit 4  also leave a temporary file (removed at Open) and an unrelated file
//          (left alone) in the directory
//
// Invariants (against a reference walk of docs/format.md "Writeback staging
// packs"): no crash; every live record of the well-formed prefix of the pack
// is recovered once (the first copy of a key); while uploads are held back,
// Get returns exactly its bytes if its data checksum holds, else EIO (or
// nothing once it is counted lost); each intact one is then uploaded exactly
// once with exactly its bytes, each corrupt one counted lost and never
// uploaded; nothing else is uploaded; afterwards no pack is left.
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "chunk/layout.h"
#include "chunk/staging.h"
#include "common/endian.h"
#include "common/log.h"
#include "fuzz_util.h"

using namespace tessera;
using namespace tessera::chunk;
namespace fs = std::filesystem;

namespace {

constexpr size_t kHeader = 32;
constexpr uint32_t kMaxKeyLen = 4096;

std::string g_base;
std::atomic<uint64_t> g_count{0};

struct Want {
  std::string data;
  bool valid = false;  // its data checksum holds
};

uint64_t HeadSum(const std::string& pack, size_t off, uint32_t key_len) {
  std::string buf = pack.substr(off + 4, 20);
  buf.append(pack, off + kHeader, key_len);
  return XXH64(buf.data(), buf.size(), 0);
}

// Walks the pack as docs/format.md describes, fixing checksums as the flags
// ask; fills `want` with the first live copy of each key.
void Walk(std::string* pack, uint8_t flags, std::map<std::string, Want>* want) {
  size_t off = 0;
  for (size_t index = 0; pack->size() - off >= kHeader; ++index) {
    const char* h = pack->data() + off;
    const bool live = std::memcmp(h, "TSSR", 4) == 0;
    if (!live && std::memcmp(h, "TSSD", 4) != 0) break;
    const uint64_t version = GetLE(h + 4, 4), key_len = GetLE(h + 8, 4), len = GetLE(h + 12, 4);
    if (version != 1 || key_len == 0 || key_len > kMaxKeyLen || len > kChunkSize) break;
    if (pack->size() - off - kHeader < key_len + len) break;
    const std::string_view data(pack->data() + off + kHeader + key_len, len);
    if ((flags & 2) && (!(flags & 4) || index % 2 == 0))
      PutLE(pack->data() + off + 16, XXH64(data.data(), data.size(), 0), 8);
    if (flags & 1) PutLE(pack->data() + off + 24, HeadSum(*pack, off, uint32_t(key_len)), 8);
    if (GetLE(pack->data() + off + 24, 8) != HeadSum(*pack, off, uint32_t(key_len))) break;
    if (live) {
      std::string key = pack->substr(off + kHeader, key_len);
      const bool valid = XXH64(data.data(), data.size(), 0) == GetLE(pack->data() + off + 16, 8);
      want->try_emplace(std::move(key), Want{std::string(data), valid});
    }
    off += kHeader + key_len + len;
  }
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  FUZZ_CHECK(out.good());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  SetLogLevel(LogLevel::kError);  // torn packs are warned about: expected here
  std::string tmpl = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + std::string("/tessera-staging-fuzz.XXXXXX");
  FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr);
  g_base = tmpl;
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(g_base, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string pack(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::map<std::string, Want> want;
  Walk(&pack, flags, &want);

  const fs::path dir = fs::path(g_base) / std::to_string(g_count++);
  fs::create_directories(dir);
  WriteFile(dir / "0000000000000001.pack", pack);
  if (flags & 8) WriteFile(dir / "0000000000000002.pack", pack);
  if (flags & 16) {
    WriteFile(dir / "0000000000000003.pack.tmp", pack);
    WriteFile(dir / "notes", "not a pack");
  }

  std::mutex mu;
  std::map<std::string, std::string> uploaded;
  size_t uploads = 0;
  StagingOptions opts;
  opts.dir = dir.string();
  opts.uploaders = 1;
  opts.uploader_nice = 0;
  opts.free_space_ratio = 0;
  opts.retry_initial = std::chrono::milliseconds(1);
  opts.retry_max = std::chrono::milliseconds(1);
  // Uploads wait at a gate until every block has been read back through Get.
  std::condition_variable gate_cv;
  bool gate_open = false;
  opts.upload = [&](const std::string& key, const BlockRef& block) {
    FUZZ_CHECK(block != nullptr);
    std::unique_lock lock(mu);
    gate_cv.wait(lock, [&] { return gate_open; });
    ++uploads;
    uploaded.emplace(key, *block);
    return Status::OK();
  };
  {
    Result<std::unique_ptr<StagingArea>> area = StagingArea::Open(opts);
    if (!area.ok()) std::fprintf(stderr, "Open: %s\n", area.status().ToString().c_str());
    FUZZ_CHECK(area.ok());
    const StagingArea::Stats before = (*area)->stats();
    FUZZ_CHECK(before.recovered == want.size());
    for (const auto& [key, w] : want) {
      Result<BlockRef> got = (*area)->Get(key);
      if (w.valid) {  // staged (its upload has not finished: the gate) and intact
        FUZZ_CHECK(got.ok() && *got != nullptr && **got == w.data);
      } else {  // corrupt: EIO, or already counted lost by a worker
        FUZZ_CHECK(got.ok() ? *got == nullptr : got.status().code() == EIO);
      }
    }
    {
      std::lock_guard lock(mu);
      gate_open = true;
    }
    gate_cv.notify_all();
    (*area)->Drain();
    const StagingArea::Stats after = (*area)->stats();
    size_t valid = 0;
    for (const auto& [key, w] : want) valid += w.valid;
    FUZZ_CHECK(after.pending_blocks == 0 && after.pending_bytes == 0);
    FUZZ_CHECK(after.uploaded == valid);
    FUZZ_CHECK(after.lost == want.size() - valid);
    FUZZ_CHECK(after.packs == 0);
    std::lock_guard lock(mu);
    FUZZ_CHECK(uploads == valid && uploaded.size() == valid);
    for (const auto& [key, bytes] : uploaded) {
      auto it = want.find(key);
      FUZZ_CHECK(it != want.end() && it->second.valid && it->second.data == bytes);
    }
  }
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  std::set<std::string> expect = {".lock"};
  if (flags & 16) expect.insert("notes");
  FUZZ_CHECK(left == expect);
  fs::remove_all(dir);
  return 0;
}
