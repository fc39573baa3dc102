// One writer per store. `pcr build` and `pcr merge` (and any later command that writes a store)
// hold an exclusive flock(2) on STORE.lock, beside STORE, from before it touches STORE.partial
// until STORE.partial has become STORE; a second writer is refused at once, told the holder's pid.
//
// Why beside STORE and not inside STORE.partial: the lock must outlive the rename of
// STORE.partial to STORE (and --force's rename of the old STORE), and a fresh build removes
// the contents of a stale STORE.partial, which must never happen under another writer.
#pragma once

#include <string>
#include <string_view>

#include "common/file_util.h"
#include "common/status.h"

namespace pcrfs::tools {

class StoreWriterLock {
 public:
  // The lock file of `store`: STORE.lock (trailing slashes of STORE ignored).
  static std::string LockPath(const std::string& store);

  // Takes the lock without waiting for `command` ("build", "merge": a word, named to a refused
  // writer). AlreadyExists naming the holder's command, pid and host when another process, or
  // another StoreWriterLock of this process, holds it; IOError when the lock file cannot be
  // created or locked (e.g. ENOLCK on a file system without locks).
  static Result<StoreWriterLock> Acquire(const std::string& store,
                                         std::string_view command = "build");

  StoreWriterLock(StoreWriterLock&&) = default;
  StoreWriterLock& operator=(StoreWriterLock&&) = default;
  StoreWriterLock(const StoreWriterLock&) = delete;
  StoreWriterLock& operator=(const StoreWriterLock&) = delete;
  // Removes the lock file, then releases the lock.
  ~StoreWriterLock();

  const std::string& path() const { return path_; }

 private:
  StoreWriterLock(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  std::string path_;
  UniqueFd fd_;
};

}  // namespace pcrfs::tools
