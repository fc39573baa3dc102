#include "common/proc_self.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/file_util.h"

namespace pcrfs::proc {

namespace {

// /proc/self/statm opened once per thread and read with pread: the index checks it every 16
// lookups, and open + read + close were three syscalls each time (now getpid and pread). An
// fd opened through /proc/self names the process that opened it, so a forked child (the
// daemon forks into the background after its checks) opens its own.
class StatmFile {
 public:
  // Its text (at most size - 1 bytes) into buf; false if it cannot be read.
  bool Read(char* buf, size_t size) {
    const pid_t pid = ::getpid();
    if (!fd_.valid() || pid_ != pid) {
      fd_ = UniqueFd(::open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
      pid_ = pid;
      if (!fd_.valid()) return false;
    }
    const ssize_t n = ::pread(fd_.get(), buf, size - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    return true;
  }

 private:
  UniqueFd fd_;
  pid_t pid_ = 0;
};

}  // namespace

namespace {

// statm's resident and shared fields in bytes; false if it cannot be read.
bool ReadStatm(uint64_t* resident_bytes, uint64_t* shared_bytes) {
  // statm: size resident shared text lib data dt, in pages.
  thread_local StatmFile statm;
  char buf[128];
  unsigned long long size = 0, resident = 0, shared = 0;
  if (!statm.Read(buf, sizeof buf) ||
      std::sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3) {
    return false;
  }
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  *resident_bytes = resident * page;
  *shared_bytes = shared * page;
  return true;
}

}  // namespace

uint64_t ResidentFileBytes() {
  uint64_t resident = 0, shared = 0;
  return ReadStatm(&resident, &shared) ? shared : 0;
}

uint64_t ResidentBytes() {
  uint64_t resident = 0, shared = 0;
  return ReadStatm(&resident, &shared) ? resident : 0;
}

std::optional<uint64_t> StorageReadBytes() {
  const std::string io = ReadSmallFile("/proc/self/io", 512);
  const char* at = std::strstr(io.c_str(), "\nread_bytes: ");
  unsigned long long v = 0;
  if (at == nullptr || std::sscanf(at, "\nread_bytes: %llu", &v) != 1) return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::optional<Mapping> MappingOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return std::nullopt;
  std::optional<Mapping> found;
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long long lo, hi;
    if (std::sscanf(line, "%llx-%llx", &lo, &hi) == 2 && lo <= addr && addr < hi) {
      found = Mapping{reinterpret_cast<void*>(static_cast<uintptr_t>(lo)),
                      static_cast<size_t>(hi - lo)};
      break;
    }
  }
  std::fclose(maps);
  return found;
}

}  // namespace pcrfs::proc
