// Thin RAII and full-transfer wrappers over POSIX file I/O. Every failure is a Status that
// names the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace pcrfs {

// open(2) with O_CLOEXEC added.
Result<UniqueFd> OpenFile(const std::string& path, int flags, int mode = 0644);

// Reads exactly n bytes at offset; a short file is a Corruption ("truncated") naming `what`.
Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& what);
// Writes all n bytes, retrying on EINTR and short writes.
Status WriteFull(int fd, const void* buf, size_t n, const std::string& what);
Status PwriteFull(int fd, const void* buf, size_t n, uint64_t offset, const std::string& what);

// Reads a whole file. Fails with ResourceExhausted if it is larger than max_bytes.
Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, uint64_t max_bytes);
// The same from an open file, from its current position to EOF; `what` names it in errors.
Result<std::vector<uint8_t>> ReadWholeFd(int fd, uint64_t max_bytes, const std::string& what);

// Reads at most `max` bytes of a small file (a /proc file, whose st_size is 0) with as few
// read(2) calls as it takes, into a reused buffer; an empty string if it cannot be opened or
// read. For numbers polled now and then (/proc/self/io); proc::ResidentFileBytes keeps its
// statm fd open instead.
std::string ReadSmallFile(const char* path, size_t max = 4096);

// Writes `data` to path via a temporary file of this process and call (path.tmp.PID.N) + fsync +
// rename, so readers see old or new, never half, and processes writing the same path at once
// (DataLoader workers opening one cache folder) each put a whole copy in place. The temporary
// file is created anew (O_EXCL | O_NOFOLLOW, after removing a stale one): a symlink planted
// there is removed, never followed. `mode`: 0600 for a cache folder's files.
Status WriteFileAtomic(const std::string& path, const void* data, size_t n, int mode = 0644);

// True for a name WriteFileAtomic's temporary files take (NAME.tmp.PID.N): what a process
// killed between the write and the rename leaves behind.
bool IsAtomicWriteLeftover(std::string_view name);
// Removes such leftovers directly in `dir` (not below); for a folder only this process writes
// (a build's STORE.partial), never for one shared with live writers. The count removed.
Result<size_t> RemoveAtomicWriteLeftovers(const std::string& dir);

// Creates `dir` and its missing parents (each new one 0700) and checks it: a folder owned by
// another user, or writable by group or others, is refused with one line naming it (its files
// could be replaced or read by someone else); ours with group or other bits is narrowed to 0700.
// *created: the outermost folder this call made, "" if none (what a failed mount removes).
Status MakePrivateDir(const std::string& dir, std::string* created = nullptr);

// For a file that holds a secret (keys, a token, a SAS, headers): one warning in the log, once
// per path and process, when group or others may read it. Nothing if it cannot be stat'ed (the
// read that follows says why).
void WarnIfReadableByOthers(const std::string& path, std::string_view what);

// As root, a file whose contents root acts on (a credential_process command) must be root's
// and writable by no one else, or another user chooses what root runs: else InvalidArgument
// naming the file, its owner or mode. Always OK for other users (their files are their own).
Status CheckTrustedByRoot(const std::string& path, std::string_view what);

Status FsyncPath(const std::string& path);

}  // namespace pcrfs
