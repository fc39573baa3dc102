// pcrfs STORE MOUNTPOINT [options]: option parsing, checks before mounting, the session loop.
#pragma once

namespace pcrfs::fs {

// Exit codes: 0 unmounted cleanly, 1 bad arguments, store or mount point (nothing mounted),
// 2 the FUSE session failed.
int RunDaemon(int argc, char** argv);

}  // namespace pcrfs::fs
