#include "cli/bench_util.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

namespace tessera::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kBarWidth = 20;
constexpr auto kRedrawEvery = std::chrono::milliseconds(200);

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The width of the terminal on stderr: a redrawn line must not wrap.
size_t TerminalColumns() {
  struct winsize ws;
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return 80;
  return ws.ws_col;
}

}  // namespace

void Table::Print(std::FILE* out) const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = header_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  std::string rule = "+";
  for (size_t w : width) rule += std::string(w + 2, '-') + "+";
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line = "|";
    for (size_t c = 0; c < row.size(); ++c)
      line += c < left_columns_ ? fmt::format(" {:<{}} |", row[c], width[c]) : fmt::format(" {:>{}} |", row[c], width[c]);
    std::fprintf(out, "%s\n", line.c_str());
  };
  std::fprintf(out, "%s\n", rule.c_str());
  print_row(header_);
  std::fprintf(out, "%s\n", rule.c_str());
  for (const auto& row : rows_) print_row(row);
  std::fprintf(out, "%s\n", rule.c_str());
}

Phase::Phase(std::string title, uint64_t total, std::string unit)
    : title_(std::move(title)), total_(total), unit_(std::move(unit)), bytes_(unit_ == "MiB") {}

Status Phase::Run(int threads, const std::function<Status(int thread)>& worker) {
  start_ = std::chrono::steady_clock::now();

  // The progress line is redrawn only on a terminal: a log gets one line.
  std::mutex report_mu;
  std::condition_variable report_cv;
  bool finished = false;  // guarded by report_mu
  std::thread reporter;
  if (isatty(STDERR_FILENO)) {
    reporter = std::thread([&] {
      const size_t columns = TerminalColumns() - 1;
      std::unique_lock lock(report_mu);
      while (!report_cv.wait_for(lock, kRedrawEvery, [&] { return finished; }))
        std::fprintf(stderr, "\r\033[K%s", ProgressLine(SecondsSince(start_)).substr(0, columns).c_str());
    });
  }

  std::vector<double> busy(size_t(threads), 0.0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto begin = std::chrono::steady_clock::now();
      Status st = worker(t);
      busy[size_t(t)] = SecondsSince(begin);
      if (st.ok()) return;
      failed_ = true;
      std::lock_guard lock(mu_);
      if (first_error_.ok()) first_error_ = st;
    });
  }
  for (auto& w : workers) w.join();
  seconds_ = SecondsSince(start_);
  for (double b : busy) busy_seconds_ += b;

  if (reporter.joinable()) {
    {
      std::lock_guard lock(report_mu);
      finished = true;
    }
    report_cv.notify_one();
    reporter.join();
    std::fprintf(stderr, "\r\033[K");
  }
  std::fprintf(stderr, "%s\n", ProgressLine(seconds_).c_str());
  std::lock_guard lock(mu_);
  return first_error_.ok() ? Status::OK() : first_error_.With(title_);
}

std::string Phase::ProgressLine(double elapsed) const {
  const uint64_t done = amount_.load(std::memory_order_relaxed);
  const double fraction = total_ == 0 ? 1.0 : std::min(1.0, double(done) / double(total_));
  const int filled = int(fraction * kBarWidth);
  const std::string bar = std::string(size_t(filled), '=') + std::string(size_t(kBarWidth - filled), ' ');
  const std::string count = bytes_ ? fmt::format("{:.1f}/{:.1f} MiB", double(done) / kMiB, double(total_) / kMiB)
                                   : fmt::format("{}/{} {}", done, total_, unit_);
  const double rate = elapsed > 0 ? double(done) / elapsed : 0;
  const std::string speed = bytes_ ? fmt::format("{:.1f} MiB/s", rate / kMiB) : fmt::format("{:.1f} {}/s", rate, unit_);
  return fmt::format("{:<20} [{}] {:5.1f}%  {}  {}  used {}", title_, bar, fraction * 100, count, speed,
                     FormatDuration(elapsed));
}

std::string Phase::Rate() const {
  const double per_second = seconds_ > 0 ? double(amount()) / seconds_ : 0;
  return bytes_ ? fmt::format("{:.2f} MiB/s", per_second / kMiB) : fmt::format("{:.1f} {}/s", per_second, unit_);
}

std::string Phase::Latency(const std::string& per) const {
  const uint64_t ops = ops_.load();
  if (ops == 0) return "-";
  return FormatDuration(busy_seconds_ / double(ops)) + "/" + per;
}

std::string FormatDuration(double seconds) {
  if (seconds >= 1) return fmt::format("{:.2f} s", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

std::string RandomBytes(size_t n) {
  std::mt19937_64 rng{std::random_device{}()};
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += sizeof(uint64_t)) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min(sizeof(v), n - i));
  }
  return out;
}

}  // namespace tessera::cli
