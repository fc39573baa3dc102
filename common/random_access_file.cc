#include "common/random_access_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pcrfs {

Result<std::unique_ptr<PosixRandomAccessFile>> PosixRandomAccessFile::Open(const std::string& path,
                                                                           int extra_flags) {
  auto fd = OpenFile(path, O_RDONLY | extra_flags);
  if (!fd) return Err(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Err(Status::FromErrno(path, errno));
  if (!S_ISREG(st.st_mode)) return Err(Status::Corruption(path + ": not a regular file"));
  ::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_RANDOM);
  return std::unique_ptr<PosixRandomAccessFile>(
      new PosixRandomAccessFile(path, std::move(*fd), static_cast<uint64_t>(st.st_size)));
}

Result<std::unique_ptr<PosixRandomAccessFile>> PosixRandomAccessFile::OpenAt(
    int dirfd, const std::string& name, const std::string& path, int extra_flags) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC | extra_flags));
  if (fd.get() < 0) return Err(Status::FromErrno(path, errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Err(Status::FromErrno(path, errno));
  if (!S_ISREG(st.st_mode)) return Err(Status::Corruption(path + ": not a regular file"));
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_RANDOM);
  return std::unique_ptr<PosixRandomAccessFile>(
      new PosixRandomAccessFile(path, std::move(fd), static_cast<uint64_t>(st.st_size)));
}

Status PosixRandomAccessFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  if (offset > size_ || n > size_ - offset) {
    return Status::Corruption(path_ + ": read of " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " is past the end (" +
                              std::to_string(size_) + " bytes)");
  }
  return PreadFull(fd_.get(), dst, n, offset, path_);
}

}  // namespace pcrfs

namespace pcrfs {

void PosixRandomAccessFile::Prefetch(uint64_t offset, uint64_t n) const {
  if (offset >= size_) return;
  n = std::min(n, size_ - offset);
  // The kernel caps one WILLNEED at the device's readahead window (read_ahead_kb), so a
  // large range goes in window-sized steps.
  constexpr uint64_t kStep = uint64_t{2} << 20;
  for (uint64_t done = 0; done < n; done += kStep) {
    ::posix_fadvise(fd_.get(), static_cast<off_t>(offset + done),
                    static_cast<off_t>(std::min(kStep, n - done)), POSIX_FADV_WILLNEED);
  }
}

Result<uint64_t> PosixRandomAccessFile::Warm(uint64_t offset, uint64_t n,
                                             std::vector<uint8_t>* scratch) const {
  if (offset > size_ || n > size_ - offset) {
    return Err(Status::Corruption(path_ + ": speculative read of " + std::to_string(n) +
                                  " bytes at offset " + std::to_string(offset) +
                                  " is past the end (" + std::to_string(size_) + " bytes)"));
  }
  // A read of what is not cached, at most this much at a time, so that cached pages after it
  // are found again (the device gets large requests still).
  constexpr uint64_t kStep = uint64_t{1} << 20;
  scratch->resize(static_cast<size_t>(std::min(n, kStep)));
  uint64_t pos = 0, moved = 0;
  while (pos < n) {
    const uint64_t len = std::min<uint64_t>(n - pos, scratch->size());
    iovec iov{scratch->data(), static_cast<size_t>(len)};
    // The pages the cache holds from `pos` on, copied without I/O; EAGAIN at the first missing
    // page. (ENOTSUP or EOPNOTSUPP: a file system without RWF_NOWAIT: read everything.)
    const ssize_t got = ::preadv2(fd_.get(), &iov, 1, static_cast<off_t>(offset + pos), RWF_NOWAIT);
    if (got > 0) {
      pos += static_cast<uint64_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    PCRFS_RETURN_ERR_IF_ERROR(
        PreadFull(fd_.get(), scratch->data(), static_cast<size_t>(len), offset + pos, path_));
    pos += len;
    moved += len;
  }
  return moved;
}

bool PosixRandomAccessFile::ReadCached(uint64_t offset, size_t n, uint8_t* dst) const {
  if (offset > size_ || n > size_ - offset) return false;
  size_t done = 0;
  while (done < n) {
    iovec iov{dst + done, n - done};
    const ssize_t got =
        ::preadv2(fd_.get(), &iov, 1, static_cast<off_t>(offset + done), RWF_NOWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // EAGAIN: a page is not cached (or no RWF_NOWAIT here)
    done += static_cast<size_t>(got);
  }
  return true;
}

Status PrefixFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  if (offset <= prefix_.size() && n <= prefix_.size() - offset) {
    if (n != 0) std::memcpy(dst, prefix_.data() + offset, n);
    return Status::OK();
  }
  return base_.file().Read(offset, n, dst);
}

}  // namespace pcrfs
