// DumpFile (dump.h): dump lines to and from files or stdin/stdout, plain or
// gzip-compressed, through zlib's gz* stream functions.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "meta/dump.h"

namespace tessera::meta {

namespace {
Status GzError(gzFile gz, const std::string& what) {
  int code = 0;
  const char* msg = gzerror(gz, &code);
  if (code == Z_ERRNO) return Status::Err(errno != 0 ? errno : EIO, what + ": " + std::strerror(errno));
  return Status::Err(EIO, what + ": " + (msg != nullptr ? msg : "zlib error"));
}
}  // namespace

Result<std::unique_ptr<DumpFile>> DumpFile::Create(const std::string& path, bool gzip) {
  std::unique_ptr<DumpFile> f(new DumpFile());
  f->writing_ = true;
  int fd = STDOUT_FILENO;
  if (path != "-") {
    f->path_ = path;
    f->tmp_ = path + ".tmp";
    fd = ::open(f->tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return Status::Err(errno, fmt::format("creating {}: {}", f->tmp_, std::strerror(errno)));
  } else {
    fd = ::dup(STDOUT_FILENO);
    if (fd < 0) return Status::Err(errno, "stdout");
  }
  // Level 1: JSON compresses well even so, and the dump stays fast.
  gzFile gz = gzdopen(fd, gzip ? "wb1" : "wT");
  if (gz == nullptr) {
    ::close(fd);
    return Status::Err(ENOMEM, "zlib");
  }
  gzbuffer(gz, 1 << 20);
  f->gz_ = gz;
  return f;
}

Result<std::unique_ptr<DumpFile>> DumpFile::Open(const std::string& path) {
  std::unique_ptr<DumpFile> f(new DumpFile());
  int fd = path == "-" ? ::dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Err(errno, fmt::format("opening {}: {}", path, std::strerror(errno)));
  gzFile gz = gzdopen(fd, "rb");  // reads plain files as they are
  if (gz == nullptr) {
    ::close(fd);
    return Status::Err(ENOMEM, "zlib");
  }
  gzbuffer(gz, 1 << 20);
  f->gz_ = gz;
  f->path_ = path;
  return f;
}

DumpFile::~DumpFile() {
  if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Status DumpFile::Write(std::string_view line) {
  gzFile gz = static_cast<gzFile>(gz_);
  if (!line.empty() && gzwrite(gz, line.data(), unsigned(line.size())) != int(line.size()))
    return GzError(gz, "writing the dump");
  if (gzputc(gz, '\n') != '\n') return GzError(gz, "writing the dump");
  return Status::OK();
}

Result<bool> DumpFile::Read(std::string* line) {
  gzFile gz = static_cast<gzFile>(gz_);
  line->clear();
  char buf[64 << 10];
  for (;;) {
    if (gzgets(gz, buf, sizeof(buf)) == nullptr) {
      int code = 0;
      gzerror(gz, &code);
      if (code != Z_OK && code != Z_STREAM_END) return GzError(gz, "reading " + path_);
      return !line->empty();  // a last line without its newline still counts
    }
    size_t n = std::strlen(buf);
    line->append(buf, n);
    if (n > 0 && buf[n - 1] == '\n') {
      line->pop_back();
      return true;
    }
  }
}

Status DumpFile::Close() {
  gzFile gz = static_cast<gzFile>(gz_);
  gz_ = nullptr;
  if (writing_ && !tmp_.empty()) {
    // The data reaches the disk before the file takes its name.
    if (gzflush(gz, Z_FINISH) != Z_OK) {
      Status st = GzError(gz, "writing the dump");
      gzclose(gz);
      return st;
    }
  }
  int rc = gzclose(gz);
  if (rc != Z_OK) return Status::Err(EIO, fmt::format("closing {}: zlib error {}", path_.empty() ? "-" : path_, rc));
  if (writing_ && !tmp_.empty()) {
    int fd = ::open(tmp_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      int s = ::fsync(fd);
      ::close(fd);
      if (s != 0) return Status::Err(errno, "fsync of " + tmp_);
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      return Status::Err(errno, fmt::format("renaming {} to {}: {}", tmp_, path_, std::strerror(errno)));
    tmp_.clear();
  }
  return Status::OK();
}

}  // namespace tessera::meta
