// Errors as values, in the LevelDB manner: a Status is ok() or carries a code and a message.
// errno becomes a Status in exactly one place: Status::FromErrno.
#pragma once

#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>

namespace pcrfs {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,
    kCorruption,
    kIOError,
    kInvalidArgument,
    kNotSupported,
    kAlreadyExists,
    kResourceExhausted,
  };

  Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status IOError(std::string msg, int err = 0) {
    Status s(Code::kIOError, std::move(msg));
    s.errno_ = err;
    return s;
  }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status NotSupported(std::string msg) {
    return Status(Code::kNotSupported, std::move(msg));
  }
  static Status AlreadyExists(std::string msg) {
    return Status(Code::kAlreadyExists, std::move(msg));
  }
  static Status ResourceExhausted(std::string msg) {
    return Status(Code::kResourceExhausted, std::move(msg));
  }
  // "<context>: <strerror(err)>"; ENOENT maps to NotFound, ENOSPC/EDQUOT to ResourceExhausted.
  static Status FromErrno(std::string_view context, int err);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  const std::string& message() const { return msg_; }
  // The errno this status came from, or 0.
  int sys_errno() const { return errno_; }
  // Maps the status to the errno a filesystem call should return (EIO for corruption).
  int ToErrno() const;
  std::string ToString() const;

 private:
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  Code code_ = Code::kOk;
  int errno_ = 0;
  std::string msg_;
};

template <typename T>
using Result = tl::expected<T, Status>;

inline tl::unexpected<Status> Err(Status s) { return tl::unexpected<Status>(std::move(s)); }

}  // namespace pcrfs

// Propagates a non-ok Status from an expression returning Status.
#define PCRFS_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::pcrfs::Status pcrfs_status_ = (expr);        \
    if (!pcrfs_status_.ok()) return pcrfs_status_; \
  } while (0)

// The same, in a function returning Result<T>.
#define PCRFS_RETURN_ERR_IF_ERROR(expr)                          \
  do {                                                           \
    ::pcrfs::Status pcrfs_status_ = (expr);                      \
    if (!pcrfs_status_.ok()) return ::pcrfs::Err(pcrfs_status_); \
  } while (0)
