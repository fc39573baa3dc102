#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace pcrfs {

unsigned ResolveThreads(unsigned requested) {
  return requested != 0 ? requested : std::max(1u, std::thread::hardware_concurrency());
}

void ParallelFor(size_t n, unsigned threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  const auto count = static_cast<unsigned>(std::min<size_t>(ResolveThreads(threads), n));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(count - 1);
  for (unsigned t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace pcrfs
