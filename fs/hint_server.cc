#include "fs/hint_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/thread_name.h"

namespace pcrfs::fs {
namespace {

using Clock = std::chrono::steady_clock;

// Whether `dir` is a folder (not a symlink) owned by this process's user that no one else may
// write into: only then may a socket folder be made in it.
bool PrivateParent(const std::string& dir) {
  struct stat st;
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

// mkdtemp of PARENT/mnt-XXXXXX; the folder is 0700 and this process's.
Result<std::string> MakeTemp(const std::string& parent) {
  std::string name = parent + "/mnt-XXXXXX";
  if (::mkdtemp(name.data()) == nullptr) {
    return Err(Status::FromErrno("hint socket folder " + parent, errno));
  }
  return name;
}

}  // namespace

// Why a socket folder of its own per mount: a second mount by the same user gets its own
// socket without any naming scheme, and unmounting removes the socket and its folder, nothing
// shared.
Result<std::string> HintServer::MakeSocketDir(bool any_user) {
  std::string parent;
  if (::geteuid() == 0) {
    parent = "/run/pcrfs";
  } else if (const char* xdg = std::getenv("XDG_RUNTIME_DIR");
             !any_user && xdg != nullptr && xdg[0] == '/' && PrivateParent(xdg)) {
    // $XDG_RUNTIME_DIR is the user's own (0700): other users could not reach a socket there,
    // which is why -o allow_other's socket goes elsewhere.
    parent = std::string(xdg) + "/pcrfs";
  }
  if (!parent.empty()) {
    // 0711: the per-mount folders in it decide who may enter them. An existing one is used
    // only if it is private (a folder someone else made, or one others may write, is not).
    if (::mkdir(parent.c_str(), 0711) != 0 && errno != EEXIST) parent.clear();
    if (!parent.empty() && !PrivateParent(parent)) {
      Log(LogLevel::kWarning,
          parent +
              " is not a folder of this user's that only it may write; the hint socket "
              "goes to a new folder in /tmp");
      parent.clear();
    }
  }
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp";
  }
  auto dir = MakeTemp(parent);
  if (!dir) return dir;
  if (any_user && ::chmod(dir->c_str(), 0711) != 0) {
    const int err = errno;
    ::rmdir(dir->c_str());
    return Err(Status::FromErrno("hint socket folder " + *dir, err));
  }
  return dir;
}

Result<std::unique_ptr<HintServer>> HintServer::Listen(const std::string& dir, bool any_user) {
  const std::string path = dir + "/" + kSocketName;
  sockaddr_un addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Err(Status::InvalidArgument("hint socket " + path + ": path longer than " +
                                       std::to_string(sizeof addr.sun_path - 1) + " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Err(Status::FromErrno("hint socket " + path, errno));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Err(Status::FromErrno("hint socket " + path, errno));
  }
  // Connecting needs write permission on the socket file. bind made it with the umask's mode,
  // inside a folder no one else may enter until chmod'ed (MakeSocketDir), so there is no
  // window in which another user could connect.
  if (::chmod(path.c_str(), any_user ? 0666 : 0600) != 0 ||
      ::listen(fd.get(), static_cast<int>(kMaxConnections)) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return Err(Status::FromErrno("hint socket " + path, err));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return Err(Status::FromErrno("hint socket " + path + ": pipe", err));
  }
  std::unique_ptr<HintServer> server(new HintServer);
  server->dir_ = dir;
  server->path_ = path;
  server->listen_fd_ = std::move(fd);
  server->wake_read_ = UniqueFd(pipe_fds[0]);
  server->wake_write_ = UniqueFd(pipe_fds[1]);
  return server;
}

HintServer::~HintServer() { Stop(); }

void HintServer::Start(HintQueue* queue, Resolver resolve, std::string mount) {
  if (thread_.joinable() || stopped_) return;
  queue_ = queue;
  resolve_ = std::move(resolve);
  while (mount.size() > 1 && mount.back() == '/') mount.pop_back();
  mount_ = mount == "/" ? "" : std::move(mount);
  thread_ = std::thread([this] { Run(); });
}

void HintServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    const char byte = 0;
    [[maybe_unused]] const ssize_t n = ::write(wake_write_.get(), &byte, 1);
    thread_.join();
  }
  listen_fd_.Reset();
  ::unlink(path_.c_str());
  ::rmdir(dir_.c_str());  // fails, harmlessly, if something else is in it
}

// One client: what it sent that is not handled yet, in[pos..).
struct HintServer::Conn {
  UniqueFd fd;
  uint64_t id = 0;
  std::string in;
  size_t pos = 0;
  bool skipping = false;  // inside a line too long: dropping it up to its '\n'
  bool eof = false;       // the client closed: handle what is left, then close
};

bool HintServer::HandleLine(Conn* c, std::string_view line) {
  if (line.empty()) return true;
  if (line[0] == '#') {
    if (line == "#reset") {
      queue_->Clear(c->id);
      queue_->CountReset();
    } else {
      queue_->CountLine();
      queue_->Count(HintFate::kMalformed);
    }
    return true;
  }
  // Checked before resolving: only this thread adds, so the room found stays until Add.
  if (queue_->full()) return false;
  queue_->CountLine();
  if (line.find('\0') != std::string_view::npos) {
    queue_->Count(HintFate::kMalformed);
    return true;
  }
  if (line[0] == '/') {
    if (!mount_.empty() && line.size() > mount_.size() && line.starts_with(mount_) &&
        line[mount_.size()] == '/') {
      line.remove_prefix(mount_.size());
    }
    while (!line.empty() && line[0] == '/') line.remove_prefix(1);
  }
  auto ino = resolve_(line);
  if (!ino) {
    const int err = ino.error().ToErrno();
    queue_->Count(err == EISDIR   ? HintFate::kFolder
                  : err == EINVAL ? HintFate::kMalformed
                                  : HintFate::kNotFound);
    return true;
  }
  return queue_->Add(*ino, c->id) != HintQueue::Push::kFull;
}

bool HintServer::Drain(Conn* c) {
  for (;;) {
    size_t end = c->in.find('\n', c->pos);
    if (end == std::string::npos) {
      if (c->skipping) {
        c->in.clear();
        c->pos = 0;
        return true;
      }
      if (c->in.size() - c->pos > HintQueue::kMaxLineBytes) {
        // Too long already, and not over: drop what came, and the rest up to its '\n'.
        queue_->CountLine();
        queue_->Count(HintFate::kTooLong);
        c->skipping = true;
        c->in.clear();
        c->pos = 0;
        return true;
      }
      if (!c->eof || c->pos == c->in.size()) {
        c->in.erase(0, c->pos);  // keep the start of the next line
        c->pos = 0;
        return true;
      }
      end = c->in.size();  // the client closed after a last line without '\n'
    }
    if (c->skipping) {  // the end of a line too long, counted when it began
      c->skipping = false;
      c->pos = std::min(end + 1, c->in.size());
      continue;
    }
    const std::string_view line(c->in.data() + c->pos, end - c->pos);
    if (line.size() > HintQueue::kMaxLineBytes) {
      queue_->CountLine();
      queue_->Count(HintFate::kTooLong);
    } else if (!HandleLine(c, line)) {
      return false;
    }
    c->pos = std::min(end + 1, c->in.size());
  }
}

void HintServer::Run() {
  NameThisThread("pcrfs-hints");
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<pollfd> p;
  uint64_t next_id = 1;
  size_t first = 0;                  // the connection drained first: turns rotate
  Clock::time_point accept_again{};  // after EMFILE or ENFILE: not before
  std::vector<char> buf(kReadBytes);
  for (;;) {
    // Lines waiting for room first; while the queue is full no socket is read, so a client's
    // writes block in its socket buffer.
    bool blocked = false;
    for (size_t k = 0; k < conns.size() && !blocked; ++k) {
      blocked = !Drain(conns[(first + k) % conns.size()].get());
    }
    if (!conns.empty()) first = (first + 1) % conns.size();
    // A client that closed and whose lines are all handled is done; its hints stay queued.
    std::erase_if(conns, [](const std::unique_ptr<Conn>& c) {
      return c->eof && (c->pos == c->in.size() || c->skipping);
    });
    const Clock::time_point now = Clock::now();
    p.clear();
    p.push_back({wake_read_.get(), POLLIN, 0});
    p.push_back({now >= accept_again ? listen_fd_.get() : -1, POLLIN, 0});
    p.push_back({blocked ? queue_->room_event() : -1, POLLIN, 0});
    for (const auto& c : conns) p.push_back({blocked || c->eof ? -1 : c->fd.get(), POLLIN, 0});
    int timeout = -1;
    if (now < accept_again) {
      timeout = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(accept_again - now).count() + 1);
    }
    // Without an eventfd (out of descriptors when the queue was made) room is looked for often.
    if (blocked && queue_->room_event() < 0) timeout = timeout < 0 ? 10 : std::min(timeout, 10);
    const int n = ::poll(p.data(), p.size(), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, "hint server: poll: " + std::string(std::strerror(errno)));
      return;
    }
    if (p[0].revents != 0) return;
    if (p[2].revents != 0) {
      uint64_t count;
      [[maybe_unused]] const ssize_t r = ::read(queue_->room_event(), &count, sizeof count);
    }
    for (size_t i = 0; i < conns.size(); ++i) {
      if (p[i + 3].revents == 0) continue;
      Conn* c = conns[i].get();
      const ssize_t got = ::recv(c->fd.get(), buf.data(), buf.size(), 0);
      if (got > 0) {
        c->in.append(buf.data(), static_cast<size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        c->eof = true;  // closed or reset: what came is still handled
        c->fd.Reset();
      }
    }
    // Before accepting: a slot freed by a client that left goes to the next one.
    std::erase_if(conns, [](const std::unique_ptr<Conn>& c) {
      return c->eof && c->pos == c->in.size() && !c->skipping;
    });
    if ((p[1].revents & POLLIN) == 0) continue;
    for (;;) {  // every pending connection: the listening socket does not block
      UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn.valid()) {
        // Out of descriptors: the pending connection stays queued and poll would fire again
        // at once; try again a little later.
        if (errno == EMFILE || errno == ENFILE) {
          accept_again = Clock::now() + std::chrono::milliseconds(100);
        }
        break;  // EAGAIN: none left; ECONNABORTED and the like: the client went away
      }
      // Beyond the cap a connection is closed at once: its client learns it at its next write.
      const bool refused = conns.size() >= kMaxConnections;
      queue_->CountConnection(refused);
      if (refused) continue;
      auto c = std::make_unique<Conn>();
      c->fd = std::move(conn);
      c->id = next_id++;
      conns.push_back(std::move(c));
    }
  }
}

}  // namespace pcrfs::fs
