// Status and Result: the error types of every ckptfs layer.
//
// A Status carries a POSIX errno (0 = OK), a message and, for callers that
// need more than both, an optional typed payload (e.g. engine::StoreHolder on
// the EBUSY of Store::Open). fs/ answers FUSE requests with -errno taken
// straight from it; tools/ print the message and read the payload, never
// parse the message. No exception crosses an engine API.
#pragma once

#include <any>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ckptfs {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int err, std::string msg) : errno_(err), msg_(std::move(msg)) {}

  static Status OK() { return Status(); }
  static Status Errno(int err, std::string msg = {}) { return Status(err, std::move(msg)); }
  // Data on disk does not match what the index or a checksum says: EIO of
  // the kind corruption (IsCorruption), which Annotate keeps.
  static Status Corruption(std::string msg) {
    Status s(EIO, std::move(msg));
    s.corruption_ = true;
    return s;
  }
  static Status IOError(int err, const std::string& what) {
    return Status(err, what + ": " + std::strerror(err));
  }

  bool ok() const { return errno_ == 0; }
  // Made by Corruption(), or annotated from one.
  bool IsCorruption() const { return corruption_; }
  // This status with `context` before its message ("context: message"), its
  // errno, kind and payload kept.
  Status Annotate(std::string_view context) const {
    Status s = *this;
    s.msg_ = std::string(context) + ": " + msg_;
    return s;
  }
  // The errno to return to an application; 0 when ok().
  int code() const { return errno_; }
  const std::string& message() const { return msg_; }
  // The message, with "corruption: " before it for that kind.
  std::string ToString() const {
    if (ok()) return "OK";
    const std::string text = msg_.empty() ? std::string(std::strerror(errno_)) : msg_;
    return corruption_ ? "corruption: " + text : text;
  }

  // This status with `value` attached as its payload (replacing any other).
  // Copies of a Status share one immutable payload, so copying stays cheap.
  template <typename T>
  Status WithPayload(T value) const {
    Status s = *this;
    s.payload_ = std::make_shared<const std::any>(std::move(value));
    return s;
  }
  // The payload when there is one of type T; nullptr otherwise. Valid while
  // this Status (or a copy of it) lives.
  template <typename T>
  const T* payload() const {
    return payload_ == nullptr ? nullptr : std::any_cast<T>(payload_.get());
  }

 private:
  int errno_ = 0;
  bool corruption_ = false;
  std::string msg_;
  std::shared_ptr<const std::any> payload_;  // null when there is none
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  // REQUIRES: ok()
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // OK when a value is held.
  Status status() const { return ok() ? Status::OK() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ckptfs

// The engine, fs/, tools/ and gpu/ name these engine::Status and engine::Result.
namespace ckptfs::engine {
using ::ckptfs::Result;
using ::ckptfs::Status;
}  // namespace ckptfs::engine

// Returns from the enclosing function when `expr` yields a non-OK Status.
#define CKPTFS_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::ckptfs::Status _st = (expr);      \
    if (!_st.ok()) return _st;                  \
  } while (0)

#define CKPTFS_CONCAT_INNER(a, b) a##b
#define CKPTFS_CONCAT(a, b) CKPTFS_CONCAT_INNER(a, b)
// Declares `lhs` from a Result, or returns its Status from the enclosing function.
#define CKPTFS_ASSIGN_OR_RETURN(lhs, expr) \
  CKPTFS_ASSIGN_OR_RETURN_IMPL(CKPTFS_CONCAT(_res_, __LINE__), lhs, expr)
#define CKPTFS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
