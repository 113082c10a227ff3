// fsx-style model test of the VFS (fixture: vfs_fixture.h).
#include "vfs_fixture.h"

namespace tessera::vfs {
namespace {

// ---------------------------------------------------------------- fsx-style model test

// Random operations on two files (two handles each), every result checked
// against a byte model of each file.
class FsxTest : public VfsTest {
 protected:
  struct File {
    std::string name;
    Ino ino = 0;
    std::string model;
    Handle* fh[2] = {nullptr, nullptr};
  };

  struct Params {
    uint64_t seed;
    uint64_t base;  // operations land in [base, base + span)
    uint64_t span;
    int ops;
    int full_check_every;
  };

  void Run(const Params& p) {
    Config config = DefaultConfig();
    config.file_buffer_limit = 96 << 10;  // some writes commit on their own
    ASSERT_NO_FATAL_FAILURE(StartVfs(config));
    rng_.seed(p.seed);
    p_ = p;
    for (int i = 0; i < 2; ++i) {
      files_[i] = File{};
      files_[i].name = "fsx" + std::to_string(p.seed) + "_" + std::to_string(i);
      files_[i].fh[0] = Create(files_[i].name, &files_[i].ino);
      files_[i].fh[1] = Open(files_[i].ino);
      ASSERT_NE(files_[i].fh[0], nullptr);
      ASSERT_NE(files_[i].fh[1], nullptr);
    }
    for (int step = 0; step < p.ops; ++step) {
      Step();
      if (!HasFailure() && step % p.full_check_every == 0) {
        for (File& f : files_) VerifyAll(f);
      }
      if (HasFailure()) {
        ADD_FAILURE() << "fsx failed at step " << step << " (seed " << p.seed << "); last operations:\n" << History();
        break;
      }
    }
    if (!HasFailure()) {
      for (File& f : files_) VerifyAll(f);
    }
    for (File& f : files_) {
      for (Handle*& fh : f.fh) {
        Release(fh);
        fh = nullptr;
      }
    }
    if (HasFailure()) return;
    // Everything must have been committed: a fresh client sees the same bytes.
    ASSERT_NO_FATAL_FAILURE(StartVfs(config));
    for (File& f : files_) {
      f.fh[0] = f.fh[1] = Open(f.ino);
      ASSERT_NE(f.fh[0], nullptr);
      VerifyAll(f);
      Release(f.fh[0]);
      f.fh[0] = f.fh[1] = nullptr;
    }
    if (HasFailure()) ADD_FAILURE() << "after remount (seed " << p.seed << ")";
  }

 private:
  void Log(std::string line) {
    history_.push_back(std::move(line));
    if (history_.size() > 40) history_.pop_front();
  }

  std::string History() const {
    std::ostringstream out;
    for (const auto& line : history_) out << "  " << line << "\n";
    return out.str();
  }

  uint64_t PickOff() {
    switch (rng_() % 10) {
      case 0: return 0;
      case 1: return p_.base + (rng_() % (p_.span / kBlock)) * kBlock;  // block aligned
      default: return p_.base + rng_() % p_.span;
    }
  }

  uint64_t PickLen() {
    switch (rng_() % 5) {
      case 0: return 1 + rng_() % 16;
      case 1: return 1 + rng_() % kBlock;
      case 2: return kBlock;
      case 3: return 1 + rng_() % (4 * kBlock);
      default: return 1 + rng_() % (64 << 10);
    }
  }

  // Compares [off, off+len) of the file with the model.
  void Verify(File& f, uint64_t off, uint64_t len) {
    const std::string& m = f.model;
    uint64_t want_n = off >= m.size() ? 0 : std::min<uint64_t>(len, m.size() - off);
    std::string got = Read(f.fh[rng_() % 2], off, len);
    ASSERT_EQ(got.size(), want_n) << f.name << " read [" << off << ", +" << len << ") size " << m.size();
    // One memcmp (a sanitizer checks it as one range); byte by byte only to
    // name the first difference.
    if (got.empty() || m.compare(off, got.size(), got) == 0) return;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != m[off + i]) {
        FAIL() << f.name << " byte " << off + i << ": got " << int(uint8_t(got[i])) << ", want "
               << int(uint8_t(m[off + i])) << " (read [" << off << ", +" << len << "))";
      }
    }
  }

  void VerifyAll(File& f) {
    ASSERT_EQ(Length(f.ino), f.model.size()) << f.name;
    constexpr uint64_t kPiece = 8 << 20;
    for (uint64_t off = 0; off < f.model.size(); off += kPiece) ASSERT_NO_FATAL_FAILURE(Verify(f, off, kPiece));
  }

  void ModelWrite(File& f, uint64_t off, const std::string& data) {
    if (data.empty()) return;
    if (off + data.size() > f.model.size()) f.model.resize(off + data.size(), '\0');
    f.model.replace(off, data.size(), data);
  }

  void Step() {
    File& f = files_[rng_() % 2];
    Handle* fh = f.fh[rng_() % 2];
    int op = int(rng_() % 100);
    std::ostringstream line;
    line << f.name << " fh" << (fh == f.fh[0] ? 0 : 1) << ": ";
    if (op < 30) {
      uint64_t off = PickOff();
      uint64_t len = rng_() % 20 == 0 ? (128 << 10) + rng_() % (128 << 10) : PickLen();
      line << "write [" << off << ", +" << len << ")";
      Log(line.str());
      std::string data = RandomBytes(rng_, len);
      ASSERT_NO_FATAL_FAILURE(Write(fh, off, data));
      ModelWrite(f, off, data);
      ASSERT_NO_FATAL_FAILURE(Verify(f, off, len));
    } else if (op < 50) {
      uint64_t off = rng_() % 4 == 0 ? f.model.size() - std::min<uint64_t>(f.model.size(), rng_() % 100) : PickOff();
      uint64_t len = PickLen();
      line << "read [" << off << ", +" << len << ")";
      Log(line.str());
      ASSERT_NO_FATAL_FAILURE(Verify(f, off, len));
    } else if (op < 58) {
      uint64_t size = rng_() % 10 == 0 ? rng_() % (2 * kBlock) : PickOff();
      bool with_handle = rng_() % 2;
      line << "truncate " << size << (with_handle ? " (ftruncate)" : "");
      Log(line.str());
      Attr out;
      ASSERT_OK(vfs_->SetAttr(ctx_, f.ino, with_handle ? fh : nullptr, 0, Attr{}, true, size, &out));
      f.model.resize(size, '\0');
      ASSERT_EQ(out.length, size);
    } else if (op < 68) {
      static const int kModes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                   FALLOC_FL_ZERO_RANGE, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE};
      int mode = kModes[rng_() % std::size(kModes)];
      uint64_t off = PickOff(), len = PickLen();
      line << "fallocate mode " << mode << " [" << off << ", +" << len << ")";
      Log(line.str());
      ASSERT_OK(vfs_->Fallocate(ctx_, fh, mode, off, len));
      uint64_t end = off + len, size = f.model.size();
      if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
        for (uint64_t i = off; i < std::min(end, size); ++i) f.model[i] = '\0';
      }
      if (!(mode & FALLOC_FL_KEEP_SIZE) && end > size) f.model.resize(end, '\0');
      ASSERT_NO_FATAL_FAILURE(Verify(f, off > 100 ? off - 100 : 0, len + 200));
    } else if (op < 73) {
      Log(line.str() + "flush");
      ASSERT_OK(vfs_->Flush(ctx_, fh, 0));
      ASSERT_EQ(CommittedLength(f.ino), f.model.size());
    } else if (op < 78) {
      int i = int(rng_() % 2);
      Log(line.str() + "release+reopen handle " + std::to_string(i));
      Release(f.fh[i]);
      f.fh[i] = Open(f.ino);
      ASSERT_NE(f.fh[i], nullptr);
    } else if (op < 90) {
      File& src = files_[rng_() % 2];
      uint64_t off_in = rng_() % 8 == 0 ? src.model.size() + rng_() % 100 : PickOff();
      uint64_t off_out = PickOff();
      uint64_t len = PickLen();
      line << "copy_file_range from " << src.name << " [" << off_in << ", +" << len << ") to " << off_out;
      Log(line.str());
      uint64_t count = off_in >= src.model.size() ? 0 : std::min<uint64_t>(len, src.model.size() - off_in);
      bool overlap = &src == &f && off_out + count > off_in && off_out < off_in + count;
      auto r = vfs_->CopyFileRange(ctx_, src.fh[rng_() % 2], off_in, fh, off_out, len);
      if (overlap) {
        ASSERT_FALSE(r.ok());
        ASSERT_EQ(r.status().code(), EINVAL);
        return;
      }
      ASSERT_OK(r);
      ASSERT_EQ(*r, count);
      std::string bytes = src.model.substr(std::min<uint64_t>(off_in, src.model.size()), count);
      ModelWrite(f, off_out, bytes);
      ASSERT_NO_FATAL_FAILURE(Verify(f, off_out, count));
    } else {
      uint64_t off = rng_() % 3 == 0 ? rng_() % (f.model.size() + 10) : PickOff();
      int whence = rng_() % 2 ? SEEK_DATA : SEEK_HOLE;
      line << "lseek " << (whence == SEEK_DATA ? "SEEK_DATA " : "SEEK_HOLE ") << off;
      Log(line.str());
      auto r = vfs_->Lseek(ctx_, fh, off, whence);
      ASSERT_NO_FATAL_FAILURE(CheckLseek(f, off, whence, r));
    }
    ASSERT_EQ(Length(f.ino), f.model.size()) << f.name;
  }

  // Holes read as zeros; the exact extent of data is up to the layout, so
  // check what any correct answer satisfies.
  void CheckLseek(const File& f, uint64_t off, int whence, const Result<uint64_t>& r) {
    const std::string& m = f.model;
    if (off >= m.size()) {
      ASSERT_FALSE(r.ok());
      ASSERT_EQ(r.status().code(), ENXIO);
      return;
    }
    auto zero = [&](uint64_t from, uint64_t to) {
      return std::all_of(m.begin() + int64_t(from), m.begin() + int64_t(to), [](char c) { return c == 0; });
    };
    if (whence == SEEK_DATA) {
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), ENXIO);
        ASSERT_TRUE(zero(off, m.size())) << "SEEK_DATA says no data after " << off;
        return;
      }
      ASSERT_GE(*r, off);
      ASSERT_LT(*r, m.size());
      ASSERT_TRUE(zero(off, *r)) << "SEEK_DATA from " << off << " skipped data before " << *r;
    } else {
      ASSERT_OK(r);
      ASSERT_GE(*r, off);
      ASSERT_LE(*r, m.size());
      if (*r < m.size()) {
        ASSERT_EQ(m[*r], 0) << "SEEK_HOLE from " << off << " reports data at " << *r;
      }
    }
  }

  Params p_{};
  std::mt19937_64 rng_;
  File files_[2];
  std::deque<std::string> history_;
};

TEST_F(FsxTest, SmallFiles) {
  for (uint64_t seed : {20240601u, 7u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Run(Params{.seed = seed, .base = 0, .span = 512 << 10, .ops = ScaledOps(3000), .full_check_every = 50});
    if (HasFailure()) return;
  }
}

TEST_F(FsxTest, AcrossChunkBoundary) {
  const uint64_t seed = 99;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Run(Params{.seed = seed, .base = kChunkSize - (256 << 10), .span = 512 << 10, .ops = ScaledOps(1500),
             .full_check_every = 500});
}

}  // namespace
}  // namespace tessera::vfs
