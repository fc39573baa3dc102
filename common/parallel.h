// The one parallel loop and the one rule for "how many threads" that the tools share.
#pragma once

#include <cstddef>
#include <functional>

namespace pcrfs {

// The thread count for an option where 0 means "one per core": `requested`, or the number of
// cores (at least 1) when it is 0.
unsigned ResolveThreads(unsigned requested);

// Runs fn(i) for every i in [0, n) on up to `threads` threads (ResolveThreads applies, and
// never more threads than items; the calling thread is one of them). Each thread claims the
// next index in turn, so the items run roughly in order. Returns when every call returned.
// fn must be thread-safe; to stop early, let it return at once once it has seen a failure.
void ParallelFor(size_t n, unsigned threads, const std::function<void(size_t)>& fn);

}  // namespace pcrfs
