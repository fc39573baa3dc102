#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace pcrfs {

Status Status::FromErrno(std::string_view context, int err) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  Status s;
  switch (err) {
    case ENOENT:
      s = NotFound(std::move(msg));
      break;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      s = ResourceExhausted(std::move(msg));
      break;
    case EEXIST:
      s = AlreadyExists(std::move(msg));
      break;
    case EINVAL:
    case ENAMETOOLONG:
      s = InvalidArgument(std::move(msg));
      break;
    default:
      s = IOError(std::move(msg));
  }
  s.errno_ = err;
  return s;
}

int Status::ToErrno() const {
  if (errno_ != 0) return errno_;
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kNotSupported:
      return ENOTSUP;
    case Code::kAlreadyExists:
      return EEXIST;
    case Code::kResourceExhausted:
      return ENOMEM;
    case Code::kCorruption:
    case Code::kIOError:
      return EIO;
  }
  return EIO;
}

std::string Status::ToString() const {
  const char* prefix = "";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      prefix = "not found: ";
      break;
    case Code::kCorruption:
      prefix = "corruption: ";
      break;
    case Code::kIOError:
      prefix = "I/O error: ";
      break;
    case Code::kInvalidArgument:
      prefix = "invalid argument: ";
      break;
    case Code::kNotSupported:
      prefix = "not supported: ";
      break;
    case Code::kAlreadyExists:
      prefix = "already exists: ";
      break;
    case Code::kResourceExhausted:
      prefix = "resource exhausted: ";
      break;
  }
  return prefix + msg_;
}

}  // namespace pcrfs
