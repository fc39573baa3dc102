// The FUSE low-level adapter: the only code that sees libfuse's request types. Every handler
// replies exactly once, as its last action; errors are errnos from the matching syscall's man
// page; every entry point catches everything (bad_alloc -> ENOMEM, anything else -> EIO).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

struct fuse_lowlevel_ops;

namespace pcrfs::metrics {
class Exposition;
}

namespace pcrfs::fs {

class Filesystem;

// The operations table; the session's userdata must be the Filesystem*.
const fuse_lowlevel_ops& FuseOperations();

// The FUSE requests of this process by operation: pcrfs_fuse_requests_total and
// pcrfs_fuse_request_duration_seconds.
void AppendFuseMetrics(metrics::Exposition* out);

// Tests only (PCRFS_TEST_PUSH_UNDER_READ=1, fs/daemon.cc): from now on, a READ at offset 0
// hands the bytes it answers to `push` (FUSE_NOTIFY_STORE) before it replies. The push waits
// for the page that READ itself holds locked, forever: the wedge of issue 34 on demand. Call
// before the session serves.
void SetPushUnderReadForTest(std::function<int(uint64_t ino, const uint8_t* data, size_t n)> push);

// How long the kernel may cache entries, attributes and negative lookups: the store is
// immutable, so as long as it likes.
inline constexpr double kCacheTimeoutSeconds = 365.0 * 24 * 3600;

}  // namespace pcrfs::fs
