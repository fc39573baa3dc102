#include "fs/map_trimmer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace pcrfs::fs {

uint64_t ResidentFileBytes() {
  // statm: size resident shared text lib data dt, in pages. One read of a tiny file.
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3) return 0;
  return static_cast<uint64_t>(shared) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

MapTrimmer::MapTrimmer(uint64_t budget, std::chrono::milliseconds interval,
                       std::function<void()> release)
    : budget_(budget), interval_(interval), release_(std::move(release)), thread_([this] {
        Loop();
      }) {}

MapTrimmer::~MapTrimmer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t MapTrimmer::releases() const {
  std::lock_guard<std::mutex> l(mu_);
  return releases_;
}

void MapTrimmer::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, interval_, [&] { return stop_; })) {
    l.unlock();
    const bool over = ResidentFileBytes() > budget_;
    if (over) release_();
    l.lock();
    if (over) ++releases_;
  }
}

}  // namespace pcrfs::fs
