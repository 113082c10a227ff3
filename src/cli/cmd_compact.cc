// compact: merges the slices of files' chunks into fresh ones.
#include <ftw.h>
#include <sys/stat.h>

#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "chunk/chunk_store.h"
#include "chunk/compression.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/mount_state.h"
#include "vfs/compactor.h"

namespace tessera::cli {

namespace {
std::vector<std::pair<std::string, ino_t>>* g_files = nullptr;  // nftw has no user pointer
int Collect(const char* path, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_F && S_ISREG(st->st_mode)) g_files->emplace_back(path, st->st_ino);
  return 0;
}
}  // namespace

int Compact(const std::vector<std::string>& paths) {
  int rc = 0;
  for (const auto& path : paths) {
    auto state = MountStateOf(path);
    if (!state.ok()) {
      rc = Fail(state.status().ToString());
      continue;
    }
    auto vol = OpenVolume(state->meta_url);
    if (!vol.ok()) return Fail(vol.status().ToString());
    chunk::StoreConfig sc;
    sc.block_size = vol->format.block_size;
    auto compression = chunk::ParseCompression(vol->format.compression);
    if (!compression.ok()) return Fail(compression.status().ToString());
    sc.compression = *compression;
    sc.mem_cache_bytes = 0;
    chunk::ChunkStore store(vol->store.get(), sc);

    std::vector<std::pair<std::string, ino_t>> files;
    g_files = &files;
    if (nftw(path.c_str(), Collect, 16, FTW_PHYS) != 0) {
      rc = Fail(fmt::format("{}: {}", path, strerror(errno)));
      continue;
    }
    uint64_t before = 0, after = 0;
    for (const auto& [file, ino] : files) {
      meta::Attr attr;
      if (!vol->meta->GetAttr(meta::Context::Root(), ino, &attr).ok()) continue;
      uint32_t chunks = uint32_t((attr.length + chunk::kChunkSize - 1) / chunk::kChunkSize);
      for (uint32_t c = 0; c < chunks; ++c) {
        vfs::CompactResult r;
        Status st = vfs::CompactChunk(vol->meta.get(), &store, ino, c, 2, &r);
        if (!st.ok()) {
          rc = Fail(fmt::format("{} chunk {}: {}", file, c, st.ToString()));
          continue;
        }
        before += r.slices_before;
        after += r.slices_after;
      }
    }
    std::printf("%s: %zu file(s), slices %llu -> %llu\n", path.c_str(), files.size(), (unsigned long long)before,
                (unsigned long long)after);
  }
  return rc;
}

}  // namespace tessera::cli
