// Errors as values. A Status carries a positive errno-style code (0 = OK) and
// an optional message. Every layer returns Status / Result<T>; the FUSE adapter
// converts to errno in exactly one place. No exceptions cross a module boundary.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <utility>

namespace tessera {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status OK() { return Status(); }
  // code is a positive errno value (ENOENT, EIO, ...).
  static Status Err(int code, std::string msg = {}) { return Status(code, std::move(msg)); }
  // The request was sent but its reply was lost (a connection broke during
  // a COMMIT, a Redis reply never came): it may or may not have taken
  // effect. The caller must not undo anything on it (delete objects a
  // commit may reference); code is the errno to report (EIO).
  static Status Unknown(int code, std::string msg) {
    Status st(code, std::move(msg));
    st.unknown_ = true;
    return st;
  }

  bool ok() const { return code_ == 0; }
  int code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

  // Classification by what the caller should do, never by message text
  // (common/retry.h is the one place that acts on it):
  //  - transient(): the same request may succeed if sent again (a conflict,
  //    a timeout, a dropped connection, a server error); whether sending it
  //    again is safe is the caller's knowledge (idempotent requests only);
  //  - outcome_unknown(): it may have taken effect; never undo on it;
  //  - anything else is the answer (not found, permission, no space, ...).
  bool transient() const {
    return code_ == EAGAIN || code_ == EBUSY || code_ == ETIMEDOUT || code_ == ECONNRESET || code_ == ECONNREFUSED ||
           code_ == EINTR || code_ == EPIPE || code_ == EHOSTUNREACH || code_ == ENETUNREACH || code_ == ENETDOWN;
  }
  bool outcome_unknown() const { return unknown_; }
  bool not_found() const { return code_ == ENOENT; }

  // Adds context in front of the message; keeps the code and class.
  Status With(const std::string& context) const {
    Status st(code_, msg_.empty() ? context : context + ": " + msg_);
    st.unknown_ = unknown_;
    return st;
  }

 private:
  Status(int code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  int code_ = 0;
  bool unknown_ = false;
  std::string msg_;
};

// A value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                       // NOLINT(implicit)
  Result(Status status) : status_(std::move(status)) {                 // NOLINT(implicit)
    if (status_.ok()) status_ = Status::Err(EIO, "Result built from OK status without value");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define TESSERA_CONCAT_INNER(a, b) a##b
#define TESSERA_CONCAT(a, b) TESSERA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr) RETURN_IF_ERROR_IMPL(TESSERA_CONCAT(_st_, __COUNTER__), expr)
#define RETURN_IF_ERROR_IMPL(tmp, expr) \
  do {                                  \
    ::tessera::Status tmp = (expr);     \
    if (!tmp.ok()) return tmp;          \
  } while (0)

// ASSIGN_OR_RETURN(auto x, ResultExpr) / ASSIGN_OR_RETURN(x, ResultExpr)
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(TESSERA_CONCAT(_res_, __COUNTER__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

}  // namespace tessera
