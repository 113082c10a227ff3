// Shared by `tessera bench` and `tessera objbench`: a timed phase run by N
// threads with a progress display, result formatting, and the bordered text
// tables both commands print (in the style of `juicefs bench`).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::cli {

// A text table framed by +---+ lines: the first left_columns columns are
// left-aligned, the others (the figures) right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header, size_t left_columns = 1)
      : header_(std::move(header)), left_columns_(left_columns) {}
  // A row has as many cells as the header.
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::FILE* out) const;

 private:
  std::vector<std::string> header_;
  size_t left_columns_;
  std::vector<std::vector<std::string>> rows_;
};

// One timed phase: threads run a worker in parallel while a progress line on
// stderr follows the work done (redrawn a few times a second when stderr is a
// TTY; otherwise one summary line when the phase ends).
//
// Thread safety: Add, failed and Run's workers may run concurrently; the
// accessors are meant for after Run returns.
class Phase {
 public:
  // title: the phase's name (also its row in the result table).
  // total: the work expected, in bytes when unit is "MiB" (shown in MiB),
  // otherwise in items of unit ("files", "objects").
  Phase(std::string title, uint64_t total, std::string unit);

  // Records finished work: amount (bytes or items) done by ops operations.
  void Add(uint64_t amount, uint64_t ops = 1) {
    amount_.fetch_add(amount, std::memory_order_relaxed);
    ops_.fetch_add(ops, std::memory_order_relaxed);
  }
  // True once a worker has failed; long workers check it to stop early.
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  // Runs worker(0) .. worker(threads-1) in parallel, waits for all of them
  // and returns the first error (prefixed with the phase's title).
  Status Run(int threads, const std::function<Status(int thread)>& worker);

  const std::string& title() const { return title_; }
  // "123.45 MiB/s" or "678.9 files/s", over the wall time of Run.
  std::string Rate() const;
  // Mean latency of one operation, counted as the threads' total busy time
  // divided by the operations: "1.23 ms/op" with per = "op".
  std::string Latency(const std::string& per) const;
  uint64_t amount() const { return amount_.load(); }
  double seconds() const { return seconds_; }

 private:
  std::string ProgressLine(double elapsed) const;

  const std::string title_;
  const uint64_t total_;
  const std::string unit_;
  const bool bytes_;  // unit_ == "MiB": amounts are bytes

  std::atomic<uint64_t> amount_{0};
  std::atomic<uint64_t> ops_{0};
  std::atomic<bool> failed_{false};
  std::chrono::steady_clock::time_point start_;

  std::mutex mu_;
  Status first_error_;  // guarded by mu_

  double seconds_ = 0;       // wall time of Run
  double busy_seconds_ = 0;  // sum of the workers' run times
};

// "1.2 s", "34.56 ms" or "789.0 us".
std::string FormatDuration(double seconds);

// n incompressible bytes, so that compression cannot flatter a benchmark.
std::string RandomBytes(size_t n);

}  // namespace tessera::cli
