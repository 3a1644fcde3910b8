// Status: the outcome of an operation that can fail for reasons outside this
// process (a dead peer, bad bytes, bad configuration, a deadline).
//
// A Status is a value: cheap to copy when ok, thread-compatible.
#ifndef PS_STATUS_H_
#define PS_STATUS_H_

#include <glog/logging.h>

#include <memory>
#include <ostream>
#include <string>
#include <utility>

namespace ps {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument = 1,
    kNotFound = 2,
    kUnavailable = 3,
    kDeadlineExceeded = 4,
    kAborted = 5,
    kCorruption = 6,
    kInternal = 7,
  };

  Status() = default;
  Status(Code code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(Code::kInvalidArgument, std::move(m));
  }
  static Status NotFound(std::string m) {
    return Status(Code::kNotFound, std::move(m));
  }
  static Status Unavailable(std::string m) {
    return Status(Code::kUnavailable, std::move(m));
  }
  static Status DeadlineExceeded(std::string m) {
    return Status(Code::kDeadlineExceeded, std::move(m));
  }
  static Status Aborted(std::string m) {
    return Status(Code::kAborted, std::move(m));
  }
  static Status Corruption(std::string m) {
    return Status(Code::kCorruption, std::move(m));
  }
  static Status Internal(std::string m) {
    return Status(Code::kInternal, std::move(m));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Unavailable: server 9 died", or "OK".
  std::string ToString() const {
    if (ok()) return "OK";
    return std::string(CodeName(code_)) + ": " + message_;
  }

  static const char* CodeName(Code code) {
    switch (code) {
      case Code::kOk:
        return "OK";
      case Code::kInvalidArgument:
        return "InvalidArgument";
      case Code::kNotFound:
        return "NotFound";
      case Code::kUnavailable:
        return "Unavailable";
      case Code::kDeadlineExceeded:
        return "DeadlineExceeded";
      case Code::kAborted:
        return "Aborted";
      case Code::kCorruption:
        return "Corruption";
      case Code::kInternal:
        return "Internal";
    }
    return "Unknown";
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) {
  return os << s.ToString();
}

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    CHECK(!status_.ok()) << "StatusOr built from an ok Status without value";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& {
    CHECK(ok()) << status_;
    return value_;
  }
  T& value() & {
    CHECK(ok()) << status_;
    return value_;
  }
  T&& value() && {
    CHECK(ok()) << status_;
    return std::move(value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;
  T value_{};
};

}  // namespace ps

// Returns early from the enclosing Status-returning function on error.
#define PS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::ps::Status _ps_status = (expr);        \
    if (!_ps_status.ok()) return _ps_status; \
  } while (0)

#endif  // PS_STATUS_H_
