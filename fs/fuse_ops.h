// The FUSE low-level adapter: the only code that sees libfuse's request types. Every handler
// replies exactly once, as its last action; errors are errnos from the matching syscall's man
// page; every entry point catches everything (bad_alloc -> ENOMEM, anything else -> EIO).
#pragma once

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

// How long the kernel may cache entries, attributes and negative lookups: the store is
// immutable, so as long as it likes.
inline constexpr double kCacheTimeoutSeconds = 365.0 * 24 * 3600;

}  // namespace pcrfs::fs
