// `tessera summary` and `tessera info -r`: the usage of trees inside a
// mount, from the volume's directory statistics (meta/summary.h).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_util.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/control_client.h"
#include "cli/mount_state.h"
#include "meta/summary.h"

namespace tessera::cli {

namespace {

std::string Size(int64_t bytes, bool raw) {
  if (raw) return std::to_string(bytes);
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

meta::SummaryNode FromJson(const nlohmann::json& j) {
  meta::SummaryNode n;
  n.name = j.value("name", "");
  n.ino = j.value("ino", meta::Ino(0));
  n.dir = j.value("dir", false);
  n.usage = {j.value("length", int64_t(0)), j.value("space", int64_t(0)), j.value("files", int64_t(0)),
             j.value("dirs", int64_t(0))};
  if (j.contains("children"))
    for (const auto& c : j["children"]) n.children.push_back(FromJson(c));
  return n;
}

// The tree of `path`, summarised by the mount serving it (its control
// channel, vfs/control.h): as the caller, with the permissions the path
// needs, root or not.
Result<meta::SummaryNode> SummaryOf(const std::string& path, const meta::SummaryOptions& opts) {
  std::string mount_point, rel;
  RETURN_IF_ERROR(LocateInMount(path, &mount_point, &rel));
  ASSIGN_OR_RETURN(auto done, ControlCall(mount_point, path,
                                          nlohmann::json{{"op", "summary"}, {"path", rel}, {"name", path},
                                                         {"depth", opts.depth}, {"entries", opts.entries}},
                                          [](const nlohmann::json&) {}));
  if (!done.contains("summary")) return Status::Err(EIO, "the mount answered no summary (an older client?)");
  return FromJson(done["summary"]);
}

std::string RowName(const meta::SummaryNode& n, const std::string& prefix) {
  if (n.ino == 0) return prefix + n.name;  // a folded row
  return prefix + n.name + (n.dir ? "/" : "");
}

void TableRows(const meta::SummaryNode& n, const std::string& prefix, bool top, bool raw, Table* t) {
  std::string name = top ? n.name + (n.dir && !n.name.ends_with("/") ? "/" : "") : RowName(n, prefix);
  t->AddRow({name, Size(n.usage.space, raw), std::to_string(n.usage.dirs), std::to_string(n.usage.files)});
  const std::string below = top ? "" : prefix + n.name + "/";
  for (const auto& c : n.children) TableRows(c, below, false, raw, t);
}

void CsvRows(const meta::SummaryNode& n, const std::string& prefix, bool top, std::string* out) {
  std::string name = top ? n.name : RowName(n, prefix);
  std::string quoted = "\"";
  for (char c : name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  quoted += "\"";
  *out += fmt::format("{},{},{},{},{}\n", quoted, n.usage.space, n.usage.length, n.usage.dirs, n.usage.files);
  const std::string below = top ? "" : prefix + n.name + "/";
  for (const auto& c : n.children) CsvRows(c, below, false, out);
}

nlohmann::json Json(const meta::SummaryNode& n) {
  nlohmann::json j = {{"name", n.name},         {"type", n.ino == 0 ? "folded" : n.dir ? "directory" : "file"},
                      {"size", n.usage.space},  {"length", n.usage.length},
                      {"dirs", n.usage.dirs},   {"files", n.usage.files}};
  if (n.ino != 0) j["inode"] = n.ino;
  if (!n.children.empty()) {
    j["entries"] = nlohmann::json::array();
    for (const auto& c : n.children) j["entries"].push_back(Json(c));
  }
  return j;
}

}  // namespace

int Summary(const SummaryArgs& a) {
  meta::SummaryOptions opts;
  opts.depth = a.depth;
  opts.entries = a.entries;
  int rc = 0;
  nlohmann::json all = nlohmann::json::array();
  std::string csv = "path,size,length,dirs,files\n";
  for (const auto& path : a.paths) {
    auto node = SummaryOf(path, opts);
    if (!node.ok()) {
      rc = Fail(node.status().ToString());
      continue;
    }
    if (a.json) {
      all.push_back(Json(*node));
    } else if (a.csv) {
      CsvRows(*node, "", true, &csv);
    } else {
      Table t({"PATH", "SIZE", "DIRS", "FILES"});
      TableRows(*node, "", true, a.bytes, &t);
      t.Print(stdout);
    }
  }
  if (a.json) std::printf("%s\n", (a.paths.size() == 1 && !all.empty() ? all[0] : all).dump(2).c_str());
  if (a.csv) std::fputs(csv.c_str(), stdout);
  return rc;
}

// The recursive part of `tessera info -r` (cmd_volume.cc).
int InfoTree(const std::string& path) {
  meta::SummaryOptions opts;
  opts.depth = 0;
  auto node = SummaryOf(path, opts);
  if (!node.ok()) return Fail(node.status().ToString());
  std::printf("  tree: %lld dirs, %lld files, length %lld bytes, size %s\n", (long long)node->usage.dirs,
              (long long)node->usage.files, (long long)node->usage.length, Size(node->usage.space, false).c_str());
  return 0;
}

}  // namespace tessera::cli
