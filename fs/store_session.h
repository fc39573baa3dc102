// A store read without a mount: what `pcrfs STORE MNT -o scans=K,OPTIONS` serves, addressed by
// paths relative to the level's root instead of through FUSE. The Python binding
// (python/pcrfs_module.cc, `pcrfs.Store`) is a thin adapter over this class; its bytes are the
// mount's because the same Filesystem serves them, over a store opened as the daemon opens it
// (location/store_location.h: FetchMetadata, a new client, OpenRangeCache, OpenStoreAt).
//
// Thread-safe: every method may be called from many threads at once (the Filesystem's
// contract). No FUSE: nothing here needs /dev/fuse, a mount or a capability.
//
// Fork: the Filesystem runs threads (the record scheduler's pool, the page pusher) and a remote
// store's HTTP client runs curl on a thread of its own; none of them exists in a child of the
// process that opened the session, and their locks may be held there forever. So a session is
// used only by the process that opened it (every call from another one fails, EBADFD), and its
// destructor in a child leaks everything instead of joining threads that are not there: the
// child opens a session of its own (Reopen's arguments are the session's options, never a
// resolved credential).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "fs/filesystem.h"

namespace pcrfs::fs {

class StoreSession {
 public:
  using Options = std::vector<std::pair<std::string, std::string>>;

  // Opens `store` (a folder, or a URL as pcrfs takes it) with -o options as NAME=VALUE pairs
  // (ParseStoreOptions: the mount's table, its checks and messages; flags take any value). The
  // level: scans=K, else the one msssim=X chooses, else 10. Errors, each one line: the options'
  // (InvalidArgument), FetchMetadata's and Store::Open's (a missing store NotFound, a refused
  // credential IOError with EACCES, a server that fails IOError with EIO whatever the client's
  // errno, a damaged index Corruption), the caches' folders'.
  // Blocks for the remote metadata's download (conditional on its ETags: one request each when
  // unchanged).
  static Result<std::unique_ptr<StoreSession>> Open(const std::string& store,
                                                    const Options& options);
  ~StoreSession();  // in another process than the opener's: leaks everything (see above)
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  // The FUSE inode of `path`, relative to the level's root (the root itself: "", "." or "/";
  // empty and "." components are skipped, a leading "/" too). Errors carry the errno: ENOENT,
  // ENOTDIR (a component is a file), EINVAL (a ".." component), EIO (a damaged index).
  Result<uint64_t> Resolve(std::string_view path) const;
  // The attributes a mount's stat(2) gives: st_size at the level (with form=baseline the
  // re-encoded size, which may cost a re-encode: EIO if the level's bytes are damaged).
  Result<struct stat> Stat(std::string_view path) const;
  Result<struct stat> StatIno(uint64_t ino) const;
  // The entries of the folder at `path`, in the store's order (byte order of the names),
  // without "." and "..". ENOTDIR for a file.
  struct DirEntry {
    std::string name;
    bool is_dir = false;
  };
  Result<std::vector<DirEntry>> ListDir(std::string_view path) const;
  // Reads up to `size` bytes at `offset` of the file `ino` (Resolve's) into dst: the count, 0 at
  // or past the end. Errors carry the errno: EISDIR, ENOENT, EIO (damage: the daemon's one
  // line, "damaged data: RECORD: "PATH" (level K): ..."; a failing server: the client's line).
  Result<size_t> Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const;

  // Where the file `ino` is stored: its record and its slot there. Files of a record lie in
  // slot order within each group region, so a record's files in slot order read its level-K
  // prefix front to back. EISDIR for a folder.
  struct Placement {
    uint32_t record = 0;
    uint32_t slot = 0;
  };
  Result<Placement> PlacementOf(uint64_t ino) const;
  // Reads record `record`'s level-K prefix (its header, tables and group regions 1..K: every
  // byte its files' level-K reads need) with one sequential read into what the source keeps
  // (a local record's page cache; a remote store's range cache: one ranged GET), so that
  // reading its files next waits for nothing: the paper's reader. Best effort: OK without a
  // read when the source keeps nothing or has no room for bytes fetched ahead (the files are
  // then read as any read is). Errors: the record cannot be opened or read (EIO).
  Status FetchRecord(uint32_t record) const;
  // Reads the files `inos` of record `record` (PlacementOf's) the paper's way: the record's
  // level-K prefix with one sequential read into this call's memory (one ranged GET from a
  // remote store, whatever its cache's size), then each file from that copy, every piece
  // checked against its CRC. One result per file, in order: its bytes, or the error Read gives
  // for it. A file whose copy fails its check, or every file when the prefix cannot be read (or
  // is over 1 GiB), is read again as Read reads it: damage costs the files it touches, and errors
  // and logs are the mount's. With form=baseline every file is read as Read reads it, after
  // FetchRecord. EINVAL for a file that is not in `record`.
  std::vector<Result<std::vector<uint8_t>>> ReadRecord(uint32_t record,
                                                       const std::vector<uint64_t>& inos) const;

  int level() const { return level_; }
  // What errors and logs name: the local path, or the redacted URL.
  const std::string& name() const { return name_; }
  const std::string& store() const { return store_; }
  const Options& options() const { return options_; }
  bool remote() const { return remote_; }
  // Whether this process opened the session (false in a child after fork: reopen there).
  bool InOpeningProcess() const { return ::getpid() == pid_; }
  const Filesystem& filesystem() const { return *fs_; }

 private:
  StoreSession(std::string store, Options options) : store_(std::move(store)), options_(options) {}
  // OK in the opening process; EBADFD (naming both pids) in any other.
  Status CheckProcess() const;
  // The whole file `ino`, read as Read reads it.
  Result<std::vector<uint8_t>> ReadWhole(uint64_t ino) const;

  const std::string store_;
  const Options options_;
  const pid_t pid_ = ::getpid();
  std::string name_;
  bool remote_ = false;
  int level_ = 0;
  bool baseline_ = false;  // form=baseline
  // A remote store's object client and cache are the store's (OpenStoreAt keeps them alive).
  std::unique_ptr<Filesystem> fs_;
};

}  // namespace pcrfs::fs
