#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace pcrfs {

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

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

Status WriteFileAtomic(const std::string& path, const void* data, size_t n) {
  // A name of this process and call: processes that write the same file at once (DataLoader
  // workers opening one cache folder) each rename their own complete copy.
  static std::atomic<uint64_t> calls{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(calls.fetch_add(1, std::memory_order_relaxed));
  {
    auto fd = OpenFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
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

}  // namespace pcrfs
