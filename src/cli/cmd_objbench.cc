// objbench: checks that an object store behaves as object::ObjectStore
// promises, then measures it, in the style of `juicefs objbench`.
//
// Everything happens under a unique prefix, "__tessera_objbench__/<random>/",
// and every object put there is deleted at the end, whatever happened. The
// functional checks run one after the other; if any fails the performance
// phases are skipped and the exit code is 1. The performance phases each run
// on N threads that share the objects of the phase: the big object is put and
// got as block-size objects, then the small objects are put, got, listed,
// headed and deleted. Only the store's Describe() is printed, never options
// that could hold credentials.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include <fmt/format.h>

#include "cli/bench_util.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "object/object_store.h"

namespace tessera::cli {

namespace {

constexpr char kRootPrefix[] = "__tessera_objbench__";
constexpr size_t kListPage = 1000;
constexpr int kListingsPerThread = 10;

using object::ObjectInfo;
using object::ObjectStore;

std::string RandomHex() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// The code of a check that failed because the store answered, but not as
// the ObjectStore contract says.
constexpr int kBrokenContract = EPROTO;

// OK when cond holds, otherwise kBrokenContract saying what went wrong.
Status Expect(bool cond, const std::string& what) {
  return cond ? Status::OK() : Status::Err(kBrokenContract, what);
}

// OK when st is ENOENT, as op of a missing object must report.
Status ExpectNotFound(const Status& st, const std::string& op) {
  if (st.not_found()) return Status::OK();
  if (st.ok()) return Status::Err(kBrokenContract, op + " of a missing object succeeded");
  return st.With(op + " of a missing object: want ENOENT");
}

// A failure for the user: the errno's text only when the store reported one.
std::string Explain(const Status& st) {
  return st.code() == kBrokenContract ? st.message() : st.ToString();
}

// Every key under prefix, in pages of page keys.
Result<std::vector<std::string>> ListAll(ObjectStore* store, const std::string& prefix, size_t page) {
  std::vector<std::string> keys;
  std::vector<ObjectInfo> out;
  bool more = true;
  while (more) {
    RETURN_IF_ERROR(store->List(prefix, keys.empty() ? "" : keys.back(), page, &out, &more));
    if (more && out.empty()) return Status::Err(kBrokenContract, "list " + prefix + ": empty page but more to come");
    for (auto& info : out) keys.push_back(std::move(info.key));
  }
  return keys;
}

// The functional checks, in order; later ones may use objects of earlier ones.
class Checks {
 public:
  Checks(ObjectStore* store, std::string prefix) : s_(store), prefix_(std::move(prefix)) {}

  // Runs every check and returns the number that failed.
  int Run(Table* table) {
    int failed = 0;
    for (const auto& [name, check] : All()) {
      Status st = check();
      if (!st.ok()) ++failed;
      table->AddRow({name, st.ok() ? "PASS" : "FAIL: " + Explain(st)});
    }
    return failed;
  }

 private:
  using Check = std::function<Status()>;

  std::vector<std::pair<std::string, Check>> All() {
    const std::string obj = Key("obj"), missing = Key("missing");
    return {
        {"create a bucket", [this] { return s_->Create(); }},
        {"put an object", [=, this] { return s_->Put(obj, kBody); }},
        {"get an object",
         [=, this] {
           ASSIGN_OR_RETURN(std::string got, s_->Get(obj));
           return Expect(got == kBody, "got different bytes than were put");
         }},
        {"get a range in the middle",
         [=, this] {
           ASSIGN_OR_RETURN(std::string got, s_->Get(obj, 4, 7));
           return Expect(got == kBody.substr(4, 7), fmt::format("got '{}' for bytes 4-10", got));
         }},
        {"get a range past the end",
         [=, this] {
           const int64_t size = int64_t(kBody.size());
           ASSIGN_OR_RETURN(std::string tail, s_->Get(obj, size - 3, 100));
           RETURN_IF_ERROR(Expect(tail == kBody.substr(kBody.size() - 3), "a range over the end is not truncated"));
           ASSIGN_OR_RETURN(std::string beyond, s_->Get(obj, size + 10, 5));
           return Expect(beyond.empty(), "a range after the end is not empty");
         }},
        {"head an object",
         [=, this] {
           ASSIGN_OR_RETURN(ObjectInfo info, s_->Head(obj));
           return Expect(info.key == obj && info.size == int64_t(kBody.size()),
                         fmt::format("head says key '{}' size {}", info.key, info.size));
         }},
        {"get a missing object", [=, this] { return ExpectNotFound(s_->Get(missing).status(), "get"); }},
        {"head a missing object", [=, this] { return ExpectNotFound(s_->Head(missing).status(), "head"); }},
        {"delete an object",
         [=, this] {
           RETURN_IF_ERROR(s_->Delete(obj));
           return ExpectNotFound(s_->Get(obj).status(), "get after delete");
         }},
        {"delete a missing object", [=, this] { return s_->Delete(missing); }},
        {"list with a prefix", [this] { return ListWithPrefix(); }},
        {"list with a limit",
         [this] {
           std::vector<ObjectInfo> out;
           bool more = false;
           RETURN_IF_ERROR(s_->List(Key("list_"), "", 2, &out, &more));
           return Expect(out.size() == 2 && out[0].key == Key("list_0") && out[1].key == Key("list_1") && more,
                         fmt::format("limit 2 gave {} keys, more={}", out.size(), more));
         }},
        {"list page by page",
         [this] {
           ASSIGN_OR_RETURN(std::vector<std::string> keys, ListAll(s_, Key("list_"), 2));
           return Expect(keys == ListKeys(), fmt::format("pages of 2 gave {} keys, want 5 in order", keys.size()));
         }},
        {"list a missing prefix",
         [this] {
           std::vector<ObjectInfo> out;
           bool more = true;
           RETURN_IF_ERROR(s_->List(Key("nothing_"), "", kListPage, &out, &more));
           return Expect(out.empty() && !more, fmt::format("gave {} keys, more={}", out.size(), more));
         }},
        {"put an empty object",
         [this] {
           RETURN_IF_ERROR(s_->Put(Key("empty"), ""));
           ASSIGN_OR_RETURN(ObjectInfo info, s_->Head(Key("empty")));
           ASSIGN_OR_RETURN(std::string got, s_->Get(Key("empty")));
           return Expect(info.size == 0 && got.empty(), fmt::format("head size {}, got {} bytes", info.size, got.size()));
         }},
        {"overwrite an object",
         [this] {
           RETURN_IF_ERROR(s_->Put(Key("over"), "the first, longer version"));
           RETURN_IF_ERROR(s_->Put(Key("over"), "second"));
           ASSIGN_OR_RETURN(std::string got, s_->Get(Key("over")));
           ASSIGN_OR_RETURN(ObjectInfo info, s_->Head(Key("over")));
           return Expect(got == "second" && info.size == 6, fmt::format("got '{}', head size {}", got, info.size));
         }},
    };
  }

  // Puts list_0 .. list_4 (sizes 1 to 5) and a sibling outside the prefix,
  // then lists the prefix in one page.
  Status ListWithPrefix() {
    const std::vector<std::string> keys = ListKeys();
    for (size_t i = 0; i < keys.size(); ++i) RETURN_IF_ERROR(s_->Put(keys[i], std::string(i + 1, 'x')));
    RETURN_IF_ERROR(s_->Put(Key("lisx"), "not listed"));
    std::vector<ObjectInfo> out;
    bool more = true;
    RETURN_IF_ERROR(s_->List(Key("list_"), "", kListPage, &out, &more));
    bool same = out.size() == keys.size() && !more;
    for (size_t i = 0; same && i < out.size(); ++i) same = out[i].key == keys[i] && out[i].size == int64_t(i + 1);
    return Expect(same, fmt::format("gave {} keys (want 5 in order, with sizes), more={}", out.size(), more));
  }

  std::vector<std::string> ListKeys() const {
    std::vector<std::string> keys;
    for (int i = 0; i < 5; ++i) keys.push_back(Key(fmt::format("list_{}", i)));
    return keys;
  }
  std::string Key(const std::string& name) const { return prefix_ + "func_" + name; }

  static inline const std::string kBody = "tessera objbench: the quick brown fox";
  ObjectStore* const s_;
  const std::string prefix_;
};

// The performance phases; each adds a row to the table.
class Perf {
 public:
  Perf(ObjectStore* store, const ObjbenchOptions& o, std::string prefix)
      : s_(store), o_(o), prefix_(std::move(prefix)), block_(o.block_size_kib << 10),
        big_(o.big_object_size_mib << 20), small_(o.small_object_size_kib << 10),
        data_(RandomBytes(std::max(block_, small_))) {}

  Status Run() {
    if (big_ > 0) {
      const uint64_t blocks = (big_ + block_ - 1) / block_;
      RETURN_IF_ERROR(ForEach("put big object", blocks, big_, "MiB", "object", [&](Phase* p, uint64_t i) {
        RETURN_IF_ERROR(s_->Put(BigKey(i), std::string_view(data_).substr(0, BlockLen(i))));
        p->Add(BlockLen(i));
        return Status::OK();
      }));
      if (o_.drop_caches) RETURN_IF_ERROR(DropCaches());
      RETURN_IF_ERROR(ForEach("get big object", blocks, big_, "MiB", "object", [&](Phase* p, uint64_t i) {
        ASSIGN_OR_RETURN(std::string got, s_->Get(BigKey(i)));
        RETURN_IF_ERROR(Expect(got.size() == BlockLen(i), "get " + BigKey(i) + ": wrong size"));
        p->Add(got.size());
        return Status::OK();
      }));
    }
    const uint64_t n = o_.small_objects;
    if (n > 0 && o_.drop_caches) RETURN_IF_ERROR(DropCaches());
    if (n == 0) return Status::OK();
    RETURN_IF_ERROR(ForEach("put small objects", n, n, "objects", "object", [&](Phase* p, uint64_t i) {
      RETURN_IF_ERROR(s_->Put(SmallKey(i), std::string_view(data_).substr(0, small_)));
      p->Add(1);
      return Status::OK();
    }));
    RETURN_IF_ERROR(ForEach("get small objects", n, n, "objects", "object", [&](Phase* p, uint64_t i) {
      ASSIGN_OR_RETURN(std::string got, s_->Get(SmallKey(i)));
      RETURN_IF_ERROR(Expect(got.size() == small_, "get " + SmallKey(i) + ": wrong size"));
      p->Add(1);
      return Status::OK();
    }));
    // Each listing walks every small object, kListPage keys per List call
    // (the operation of the cost column).
    const uint64_t listings = uint64_t(o_.threads) * kListingsPerThread;
    RETURN_IF_ERROR(ForEach("list small objects", listings, listings * n, "objects", "op", [&](Phase* p, uint64_t) {
      std::vector<ObjectInfo> out;
      uint64_t seen = 0;
      for (bool more = true; more;) {
        RETURN_IF_ERROR(s_->List(prefix_ + "small_", out.empty() ? "" : out.back().key, kListPage, &out, &more));
        seen += out.size();
        p->Add(out.size());
        if (more && out.empty()) return Status::Err(kBrokenContract, "list: empty page but more to come");
      }
      return Expect(seen == n, fmt::format("list gave {} small objects, want {}", seen, n));
    }));
    RETURN_IF_ERROR(ForEach("head small objects", n, n, "objects", "object", [&](Phase* p, uint64_t i) {
      ASSIGN_OR_RETURN(ObjectInfo info, s_->Head(SmallKey(i)));
      RETURN_IF_ERROR(Expect(uint64_t(info.size) == small_, "head " + SmallKey(i) + ": wrong size"));
      p->Add(1);
      return Status::OK();
    }));
    return ForEach("delete small objects", n, n, "objects", "object", [&](Phase* p, uint64_t i) {
      RETURN_IF_ERROR(s_->Delete(SmallKey(i)));
      p->Add(1);
      return Status::OK();
    });
  }

  const Table& table() const { return table_; }

 private:
  using Op = std::function<Status(Phase*, uint64_t index)>;

  // Runs op(0) .. op(count-1) on the threads, each taking the next index.
  // total is the phase's work in unit (bytes for "MiB"); per names what one
  // operation recorded by op is, for the cost column.
  Status ForEach(const std::string& title, uint64_t count, uint64_t total, const std::string& unit,
                 const std::string& per, const Op& op) {
    Phase phase(title, total, unit);
    std::atomic<uint64_t> next{0};
    RETURN_IF_ERROR(phase.Run(o_.threads, [&](int) {
      while (!phase.failed()) {
        const uint64_t i = next++;
        if (i >= count) break;
        RETURN_IF_ERROR(op(&phase, i));
      }
      return Status::OK();
    }));
    table_.AddRow({title, phase.Rate(), phase.Latency(per)});
    return Status::OK();
  }

  // Cold reads of a file-storage bucket: write back and drop the page cache.
  static Status DropCaches() {
    ::sync();
    std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
    if (f == nullptr) return Status::Err(errno, "--drop-caches: cannot open /proc/sys/vm/drop_caches (needs root)");
    const bool ok = std::fputs("3\n", f) >= 0;
    if (std::fclose(f) != 0 || !ok) return Status::Err(EIO, "--drop-caches: writing /proc/sys/vm/drop_caches failed");
    return Status::OK();
  }
  uint64_t BlockLen(uint64_t i) const { return std::min(block_, big_ - i * block_); }
  std::string BigKey(uint64_t i) const { return fmt::format("{}big_{:08}", prefix_, i); }
  std::string SmallKey(uint64_t i) const { return fmt::format("{}small_{:08}", prefix_, i); }

  ObjectStore* const s_;
  const ObjbenchOptions& o_;
  const std::string prefix_;
  const uint64_t block_, big_, small_;
  const std::string data_;  // random bytes shared read-only by the putters
  Table table_{{"ITEM", "VALUE", "COST"}};
};

// Deletes every object under prefix. A file store keeps the directories of
// its keys, so for it the prefix's now empty directories are removed too
// (rmdir only: the shared root stays while another run still uses it).
Status Cleanup(ObjectStore* store, const ObjbenchOptions& o, const std::string& prefix) {
  ASSIGN_OR_RETURN(std::vector<std::string> keys, ListAll(store, prefix, kListPage));
  for (const auto& key : keys) RETURN_IF_ERROR(store->Delete(key));
  if (o.storage == "file") {
    rmdir((std::filesystem::path(o.bucket) / prefix).c_str());
    rmdir((std::filesystem::path(o.bucket) / kRootPrefix).c_str());
  }
  return Status::OK();
}

}  // namespace

int Objbench(const ObjbenchOptions& o) {
  auto store = object::Open(MakeStoreOptions(o.storage, o.bucket, &o.store));
  if (!store.ok()) return Fail(store.status().ToString());
  ObjectStore* s = store->get();
  const std::string prefix = fmt::format("{}/{}/", kRootPrefix, RandomHex());
  std::printf("Object storage: %s (objects under %s)\n\nFunctional checks:\n", s->Describe().c_str(), prefix.c_str());

  Table checks_table({"TEST", "RESULT"}, /*left_columns=*/2);
  const int failed = Checks(s, prefix).Run(&checks_table);
  checks_table.Print(stdout);

  Status result;
  if (failed == 0) {
    std::printf("\nPerformance: big object %llu MiB as %llu KiB objects, %llu small objects of %llu KiB, %d threads\n",
                (unsigned long long)o.big_object_size_mib, (unsigned long long)o.block_size_kib,
                (unsigned long long)o.small_objects, (unsigned long long)o.small_object_size_kib, o.threads);
    std::fflush(stdout);
    Perf perf(s, o, prefix);
    result = perf.Run();
    if (result.ok()) perf.table().Print(stdout);
  }
  Status cleaned = Cleanup(s, o, prefix);
  if (failed > 0) return Fail(fmt::format("{} functional check(s) failed on {}", failed, s->Describe()));
  if (!result.ok()) return Fail(Explain(result));
  if (!cleaned.ok()) return Fail(Explain(cleaned.With("removing the objects under " + prefix)));
  return 0;
}

}  // namespace tessera::cli
