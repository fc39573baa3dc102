#include "common/random_access_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

namespace pcrfs {

Result<std::unique_ptr<RandomAccessFile>> PosixRandomAccessFile::Open(const std::string& path,
                                                                      int extra_flags) {
  auto fd = OpenFile(path, O_RDONLY | extra_flags);
  if (!fd) return Err(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Err(Status::FromErrno(path, errno));
  if (!S_ISREG(st.st_mode)) return Err(Status::Corruption(path + ": not a regular file"));
  ::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_RANDOM);
  return std::unique_ptr<RandomAccessFile>(
      new PosixRandomAccessFile(path, std::move(*fd), static_cast<uint64_t>(st.st_size)));
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

}  // namespace pcrfs
