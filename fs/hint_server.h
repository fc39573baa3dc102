// The hint channel (issue 40, "the reader's order as a hint"): a Unix stream socket on which a
// process tells the daemon the files it will read next, in order. A training loop knows its
// epoch's permutation before the epoch starts; the daemon then fetches those files ahead in
// exactly that order (Filesystem's hint consumer), within the cache's room.
//
// Protocol (README "Telling pcrfs the read order"; docs/design.md):
// - A client connects to the socket named by the mount root's xattr user.pcrfs.hint_socket and
//   writes lines, each '\n'-terminated (a last line without one counts when the client closes).
// - A line is a path relative to the mount root, as the client will open it:
//   "scan5/train/n01/a.JPEG" on a mount of the ladder, "train/n01/a.JPEG" with -o scans=K. A
//   line that starts with '/' loses the mount point's path (as the daemon mounted it) and the
//   '/' after it when it starts with them, else only its leading '/'s: absolute paths under
//   the mount and root-relative ones with a '/' both work. Empty and "." components are
//   skipped; a ".." component makes the line malformed. The bytes are the names as stored
//   (UTF-8 for UTF-8 names); nothing is decoded.
// - "#reset" drops every hint of this connection still queued (a new epoch). Other lines that
//   start with '#' are malformed; empty lines are skipped.
// - Ignored and counted (HintQueue::Stats): paths that name nothing, folders, lines longer than
//   HintQueue::kMaxLineBytes, lines with a NUL byte, malformed lines, files queued already.
// - One-way: the daemon never writes to the socket, so a client never waits for a reply. While
//   the queue is full (HintQueue::kCapacity) the server reads no socket: a client's writes block
//   once its socket buffer is full, and go on as the consumer takes files. A #reset takes
//   effect when the server reaches it, after the lines written before it.
// - A connection that closes leaves its queued hints in place: they are still reads to come.
// - At most kMaxConnections at once; one more is accepted and closed at once (the client sees
//   EPIPE or ECONNRESET on its next write).
//
// One thread polls every connection. It never touches a FUSE thread: resolving a path is index
// lookups (Filesystem::LookupPath), which take no lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/file_util.h"
#include "common/status.h"
#include "fs/hint_queue.h"

namespace pcrfs::fs {

class HintServer {
 public:
  static constexpr size_t kMaxConnections = 64;
  // Bytes read from a connection at once: with kMaxLineBytes, what one connection holds.
  static constexpr size_t kReadBytes = 64 * 1024;
  static constexpr char kSocketName[] = "hints.sock";

  // The FUSE inode of the file at `path` (relative to the mount root, no leading '/').
  // Errors carry an errno (Status::ToErrno): EISDIR for a folder, EINVAL for a malformed path,
  // anything else (ENOENT, ENOTDIR, EIO) for a path that names no file.
  using Resolver = std::function<Result<uint64_t>(std::string_view path)>;

  // Makes a new folder for one mount's socket, 0700 (0711 when `any_user`: other users may
  // then reach the socket in it, never list the folder) and owned by this process's user, and
  // returns its path. Its parent, the first that suits:
  //   root: /run/pcrfs; another user without `any_user`: $XDG_RUNTIME_DIR/pcrfs (created 0700
  //   if missing). Either is used only if it is a folder (not a symlink) owned by this user
  //   and writable by no one else.
  //   Else $TMPDIR or /tmp: the folder is made by mkdtemp (a random name, created by this
  //   call, 0700), so no other user can have made or foreseen it.
  // The folder is named mnt-XXXXXX (mkdtemp). Errors: IOError with the folder and errno.
  static Result<std::string> MakeSocketDir(bool any_user);

  // Binds and listens at DIR/hints.sock, mode 0600 (0666 when `any_user`: -o allow_other, whose
  // other users read the mount too). DIR must exist and should be private (MakeSocketDir).
  // Errors: IOError "hint socket PATH: REASON" (a path longer than a socket address holds:
  // InvalidArgument).
  static Result<std::unique_ptr<HintServer>> Listen(const std::string& dir, bool any_user);
  ~HintServer();  // Stop()
  HintServer(const HintServer&) = delete;
  HintServer& operator=(const HintServer&) = delete;

  // The socket's absolute path (what user.pcrfs.hint_socket shows).
  const std::string& path() const { return path_; }

  // Starts the thread (after the daemon forks: a thread does not survive one), which adds the
  // files the lines name to *queue. `mount`: the mount point's absolute path (lines starting
  // with it and a '/' lose it); may be empty. *queue must outlive the server. At most once.
  void Start(HintQueue* queue, Resolver resolve, std::string mount);
  // Ends the thread (connections still open are closed: their queued hints stay), removes the
  // socket, and its folder if that is empty. Idempotent.
  void Stop();

 private:
  HintServer() = default;
  struct Conn;
  void Run();
  // Handles the complete lines `c` holds, in order; false if it stopped at one because the
  // queue is full (that line and those after it wait).
  bool Drain(Conn* c);
  // One line (no '\n'); false: the queue is full, nothing done.
  bool HandleLine(Conn* c, std::string_view line);

  std::string dir_, path_;
  UniqueFd listen_fd_;
  UniqueFd wake_read_, wake_write_;  // a byte here ends Run
  HintQueue* queue_ = nullptr;
  Resolver resolve_;
  std::string mount_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace pcrfs::fs
