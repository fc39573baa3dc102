#include "common/proc_self.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/file_util.h"

namespace pcrfs::proc {

uint64_t ResidentFileBytes() {
  // statm: size resident shared text lib data dt, in pages.
  unsigned long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(ReadSmallFile("/proc/self/statm", 128).c_str(), "%llu %llu %llu", &size,
                  &resident, &shared) != 3) {
    return 0;
  }
  return static_cast<uint64_t>(shared) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
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
