// tessera restore META-URL HOUR... [--put-back]: puts what the trash holds
// for those hours back where it came from (vfs/trash.h). Without --put-back
// it only says what would move.
#include <cstdio>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "vfs/trash.h"

namespace tessera::cli {

int Restore(const RestoreArgs& o) {
  auto vol = OpenVolume(o.meta_url);
  if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
  std::vector<std::string> hours = o.hours;
  if (hours.size() == 1 && hours[0] == "all") {
    hours.clear();
    std::vector<meta::Entry> all;
    Status st = vfs::ListTrashHours(vol->meta.get(), &all);
    if (!st.ok()) return Fail(st.With("listing the trash").ToString());
    for (const auto& h : all) hours.push_back(h.name);
  }
  for (const auto& h : hours)
    if (!vfs::ParseTrashHour(h).ok()) return Fail(fmt::format("'{}' is not a trash hour (YYYY-MM-DD-HH, as listed in /.trash)", h));
  uint64_t total = 0, left = 0;
  for (const auto& h : hours) {
    auto n = vfs::RestoreTrashHour(vol->meta.get(), h, o.put_back, [&](const std::string& line) {
      if (line.rfind("would ", 0) == 0) {
        std::printf("%s: %s\n", h.c_str(), line.c_str());
      } else {
        ++left;
        std::fprintf(stderr, "tessera: %s: %s\n", h.c_str(), line.c_str());
      }
    });
    if (!n.ok()) return Fail(n.status().ToString());
    total += *n;
  }
  std::printf("%s %llu entr%s from %zu hour(s)%s\n", o.put_back ? "put back" : "would put back",
              (unsigned long long)total, total == 1 ? "y" : "ies", hours.size(),
              o.put_back ? "" : " (add --put-back to move them)");
  if (left > 0) return Fail(fmt::format("{} entr{} stayed in the trash (see above)", left, left == 1 ? "y" : "ies"));
  return 0;
}

}  // namespace tessera::cli
