// tessera config: shows a volume's settings, or changes the mutable ones
// (capacity, inode limit). Mounted clients pick the new limits up at their
// next heartbeat (at most 10 s; sooner with a short --session-timeout).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/url.h"

namespace tessera::cli {

namespace {

std::string Limit(uint64_t v, bool bytes) {
  if (v == 0) return "unlimited";
  return bytes ? fmt::format("{} ({} bytes)", HumanSize(v), v) : std::to_string(v);
}

// Asks on a terminal; elsewhere a risky change needs --yes.
bool Confirmed(const std::string& question) {
  if (!isatty(STDIN_FILENO)) return false;
  std::fprintf(stderr, "%s [y/N] ", question.c_str());
  std::string answer;
  std::getline(std::cin, answer);
  return answer == "y" || answer == "Y" || answer == "yes";
}

}  // namespace

int Config(const ConfigOptions& o) {
  // Settings that objects already written depend on.
  std::vector<std::string> refused;
  if (o.block_size) refused.push_back("--block-size: the objects already written are cut at the current block size");
  if (o.compression)
    refused.push_back("--compression: the objects already written are read with the current compression");
  if (o.storage || o.bucket)
    refused.push_back("--storage/--bucket: the objects would have to be copied to the new bucket first");
  if (!refused.empty()) {
    for (const auto& r : refused) std::fprintf(stderr, "tessera: cannot change %s\n", r.c_str());
    return Fail("nothing changed");
  }

  auto vol = OpenVolume(o.meta_url);
  if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
  meta::Format f = vol->format;

  if (!o.capacity_gib && !o.inodes && !o.trash_days) {
    auto j = nlohmann::ordered_json::parse(f.ToJson());
    if (j.contains("Bucket") && j["Bucket"].is_string()) j["Bucket"] = RedactUrl(j["Bucket"].get<std::string>());
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  if (o.capacity_gib && (!std::isfinite(*o.capacity_gib) || *o.capacity_gib < 0 || *o.capacity_gib > 1e9))
    return Fail(fmt::format("--capacity {}: give GiB as a number from 0 (unlimited) to 1e9", *o.capacity_gib));
  meta::StatFs fs;
  Status st = vol->meta->StatFS(meta::Context::Root(), &fs);
  if (!st.ok()) return Fail(st.With("reading the volume's usage").ToString());
  const uint64_t used = fs.total_space - fs.avail_space;

  std::vector<std::string> changes, risks;
  if (o.capacity_gib) {
    const uint64_t cap = uint64_t(std::llround(*o.capacity_gib * double(1ull << 30)));
    if (cap != f.capacity) changes.push_back(fmt::format("capacity: {} -> {}", Limit(f.capacity, true), Limit(cap, true)));
    if (cap != 0 && cap < used)
      risks.push_back(fmt::format("the volume already uses {}, more than the new capacity: every write that "
                                  "needs space will fail with ENOSPC",
                                  HumanSize(used)));
    f.capacity = cap;
  }
  if (o.inodes) {
    if (*o.inodes != f.inodes) changes.push_back(fmt::format("inodes: {} -> {}", Limit(f.inodes, false), Limit(*o.inodes, false)));
    if (*o.inodes != 0 && *o.inodes < fs.used_inodes)
      risks.push_back(fmt::format("the volume already has {} inodes, more than the new limit: every create will "
                                  "fail with ENOSPC",
                                  fs.used_inodes));
    f.inodes = *o.inodes;
  }
  if (o.trash_days) {
    if (*o.trash_days < 0 || *o.trash_days > 36500) return Fail("--trash-days: give days from 0 (off) to 36500");
    if (*o.trash_days != f.trash_days) changes.push_back(fmt::format("trash-days: {} -> {}", f.trash_days, *o.trash_days));
    if (*o.trash_days == 0 && f.trash_days > 0)
      std::fprintf(stderr, "tessera: note: what is in /.trash now stays there (remove it as root) and removals from now "
                           "on are final\n");
    f.trash_days = *o.trash_days;
  }
  if (changes.empty()) {
    std::fprintf(stderr, "tessera: nothing to change: the settings already have these values\n");
    return 0;
  }
  for (const auto& c : changes) std::printf("%s\n", c.c_str());
  for (const auto& r : risks) std::fprintf(stderr, "tessera: warning: %s\n", r.c_str());
  if (!risks.empty() && !o.yes && !Confirmed("Change the settings anyway?"))
    return Fail("nothing changed (add --yes to change them anyway)");
  st = vol->meta->Init(f, /*force=*/true);
  if (!st.ok()) return Fail(st.With("saving the settings").ToString());
  std::fprintf(stderr,
               "tessera: settings of volume '%s' saved; mounted clients apply them at their next heartbeat "
               "(within 10 s)\n",
               f.name.c_str());
  return 0;
}

}  // namespace tessera::cli
