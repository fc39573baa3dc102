#include "common/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <set>

#include "common/log.h"

namespace pcrfs {

Result<UniqueFd> OpenFile(const std::string& path, int flags, int mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Err(Status::FromErrno(path, errno));
  return UniqueFd(fd);
}

Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(what, errno);
    }
    if (r == 0) return Status::Corruption(what + ": truncated (unexpected end of file)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::OK();
}

Status WriteFull(int fd, const void* buf, size_t n, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(what, errno);
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::OK();
}

Status PwriteFull(int fd, const void* buf, size_t n, uint64_t offset, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(what, errno);
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::OK();
}

std::string ReadSmallFile(const char* path, size_t max) {
  std::string out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(max);
  size_t used = 0;
  while (used < max) {
    const ssize_t r = ::read(fd, out.data() + used, max - used);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    used += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(used);
  return out;
}

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, uint64_t max_bytes) {
  auto fd = OpenFile(path, O_RDONLY);
  if (!fd) return Err(fd.error());
  return ReadWholeFd(fd->get(), max_bytes, path);
}

Result<std::vector<uint8_t>> ReadWholeFd(int fd, uint64_t max_bytes, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Err(Status::FromErrno(what, errno));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Err(Status::ResourceExhausted(what + ": file larger than " + std::to_string(max_bytes) +
                                         " bytes"));
  }
  std::vector<uint8_t> data;
  // Read until EOF rather than trusting st_size: the file may change under us.
  data.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  for (;;) {
    if (used == data.size()) {
      if (data.size() > max_bytes) {
        return Err(Status::ResourceExhausted(what + ": file larger than " +
                                             std::to_string(max_bytes) + " bytes"));
      }
      data.resize(data.size() * 2);
    }
    ssize_t r = ::read(fd, data.data() + used, data.size() - used);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Err(Status::FromErrno(what, errno));
    }
    if (r == 0) break;
    used += static_cast<size_t>(r);
  }
  data.resize(used);
  return data;
}

Status FsyncPath(const std::string& path) {
  auto fd = OpenFile(path, O_RDONLY);
  if (!fd) return fd.error();
  if (::fsync(fd->get()) != 0) return Status::FromErrno("fsync " + path, errno);
  return Status::OK();
}

Status WriteFileAtomic(const std::string& path, const void* data, size_t n, int mode) {
  // A name of this process and call: processes that write the same file at once (DataLoader
  // workers opening one cache folder) each rename their own complete copy.
  static std::atomic<uint64_t> calls{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(calls.fetch_add(1, std::memory_order_relaxed));
  {
    ::unlink(tmp.c_str());  // a crash's leftover (or a planted link): never written through
    auto fd = OpenFile(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
    if (!fd) return fd.error();
    Status s = WriteFull(fd->get(), data, n, tmp);
    if (s.ok() && ::fsync(fd->get()) != 0) s = Status::FromErrno("fsync " + tmp, errno);
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::FromErrno("rename " + tmp + " -> " + path, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::OK();
}

bool IsAtomicWriteLeftover(std::string_view name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string_view::npos || at == 0) return false;
  const std::string_view tail = name.substr(at + 5);  // PID.N
  const size_t dot = tail.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == tail.size()) return false;
  for (size_t i = 0; i < tail.size(); ++i) {
    if (i != dot && (tail[i] < '0' || tail[i] > '9')) return false;
  }
  return true;
}

Result<size_t> RemoveAtomicWriteLeftovers(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Err(Status::FromErrno("cannot list " + dir, errno));
  size_t removed = 0;
  Status status;
  while (const dirent* e = ::readdir(d)) {
    if (!IsAtomicWriteLeftover(e->d_name)) continue;
    if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) {
      ++removed;
    } else if (errno != ENOENT && status.ok()) {
      status = Status::FromErrno("cannot remove " + dir + "/" + e->d_name, errno);
    }
  }
  ::closedir(d);
  if (!status.ok()) return Err(status);
  return removed;
}

namespace {

std::string Octal(mode_t mode) {
  char m[8];
  std::snprintf(m, sizeof(m), "%04o", static_cast<unsigned>(mode & 07777));
  return m;
}

}  // namespace

Status MakePrivateDir(const std::string& dir, std::string* created) {
  if (created != nullptr) created->clear();
  if (dir.empty()) return Status::InvalidArgument("an empty cache folder name");
  // Each missing component from the outermost, so that what this call made is known.
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    if (!part.empty() && part.back() != '/') {
      if (::mkdir(part.c_str(), 0700) == 0) {
        if (created != nullptr && created->empty()) *created = part;
      } else if (errno != EEXIST) {
        return Status::FromErrno(part + ": cannot create the cache folder", errno);
      }
    }
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(dir, errno);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + ": not a folder");
  if (st.st_uid != ::geteuid()) {
    return Status::IOError(dir + ": cache folder refused: owned by uid " +
                               std::to_string(st.st_uid) + ", not by this user (uid " +
                               std::to_string(::geteuid()) + ")",
                           EACCES);
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::IOError(dir + ": cache folder refused: writable by group or others (mode " +
                               Octal(st.st_mode) + "); chmod 700 it",
                           EACCES);
  }
  if ((st.st_mode & 077) != 0 && ::chmod(dir.c_str(), 0700) != 0) {
    return Status::FromErrno("chmod 700 " + dir, errno);
  }
  return Status::OK();
}

void WarnIfReadableByOthers(const std::string& path, std::string_view what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & (S_IRGRP | S_IROTH)) == 0) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!warned.insert(path).second) return;
  }
  Log(LogLevel::kWarning, std::string(what) + " " + path +
                              " is readable by group or others (mode " + Octal(st.st_mode) +
                              "): it holds a secret; chmod 600 it");
}

Status CheckTrustedByRoot(const std::string& path, std::string_view what) {
  if (::geteuid() != 0) return Status::OK();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::FromErrno(std::string(what) + " " + path, errno);
  if (st.st_uid != 0) {
    return Status::InvalidArgument(std::string(what) + " " + path + " refused: owned by uid " +
                                   std::to_string(st.st_uid) +
                                   ", and root runs no command from another user's file");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::InvalidArgument(std::string(what) + " " + path +
                                   " refused: writable by group or others (mode " +
                                   Octal(st.st_mode) + "), and root runs commands from it");
  }
  return Status::OK();
}

}  // namespace pcrfs
