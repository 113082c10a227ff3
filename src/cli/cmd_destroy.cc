// tessera destroy: removes a volume — every object it wrote to the bucket,
// then every metadata record. The UUID must be given (a wrong META-URL
// cannot destroy another volume), no client may have it mounted, and a
// terminal asks once more. Interrupted, it can simply be run again: objects
// go first, the metadata (which names the volume) last.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/url.h"
#include "meta/meta_util.h"

namespace tessera::cli {

int Destroy(const DestroyOptions& o) {
  auto vol = OpenVolume(o.meta_url);
  if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
  if (Status usable = CheckBucket(*vol); !usable.ok()) return Fail(usable.message() + "; nothing destroyed");
  const meta::Format& f = vol->format;
  if (o.uuid != f.uuid)
    return Fail(fmt::format("the volume at {} is '{}' with UUID {}, not {}: nothing destroyed",
                            RedactUrl(o.meta_url), f.name, f.uuid, o.uuid));

  // Sessions of clients that are gone are cleaned; live ones refuse.
  auto live = ListLiveSessions(vol->meta.get());
  if (!live.ok()) return Fail(live.status().ToString());
  if (*live > 0)
    return Fail(fmt::format("volume '{}' is mounted by {} client(s): unmount them first; nothing destroyed", f.name,
                            *live));

  if (!o.yes) {
    if (!isatty(STDIN_FILENO))
      return Fail("destroying a volume deletes all its files for good: add --yes to confirm; nothing destroyed");
    std::fprintf(stderr, "Destroy volume '%s' (%s) with every file in it, for good? Type the volume name: ",
                 f.name.c_str(), vol->store->Describe().c_str());
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != f.name) return Fail("not confirmed; nothing destroyed");
  }

  // 1. The objects, page by page, deleted on o.threads threads.
  Progress progress;
  std::atomic<uint64_t> deleted{0}, failed{0};
  std::mutex err_mu;
  std::string first_error;
  // Blocks, then the metadata backups (mount --backup-meta).
  for (const char* prefix : {"chunks/", "meta/"}) {
    std::string after;
    for (;;) {
      std::vector<object::ObjectInfo> page;
      bool more = false;
      Status st = vol->store->List(prefix, after, 1000, &page, &more);
      if (!st.ok()) return Fail(st.With("listing the bucket; nothing of the metadata was removed, run it again").ToString());
      ParallelFor(page.size(), o.threads, [&](size_t i) {
        Status ds = vol->store->Delete(page[i].key);
        if (ds.ok() || ds.code() == ENOENT) {
          deleted.fetch_add(1);
          return;
        }
        failed.fetch_add(1);
        std::lock_guard<std::mutex> g(err_mu);
        if (first_error.empty()) first_error = ds.ToString();
      });
      progress.Show(fmt::format("deleted {} object(s)", deleted.load()));
      if (!more || page.empty()) break;
      after = page.back().key;
    }
  }
  progress.Show(fmt::format("deleted {} object(s)", deleted.load()), true);
  progress.Done();
  if (failed > 0)
    return Fail(fmt::format("{} object(s) could not be deleted (first: {}); the metadata is kept: run destroy again",
                            failed.load(), first_error));

  // 2. The metadata.
  Status st = vol->meta->Reset();
  if (!st.ok()) return Fail(st.With("removing the metadata (the objects are gone): run destroy again").ToString());
  std::printf("volume '%s' (%s) destroyed: %llu object(s) deleted, metadata removed\n", f.name.c_str(), f.uuid.c_str(),
              (unsigned long long)deleted.load());
  return 0;
}

}  // namespace tessera::cli
