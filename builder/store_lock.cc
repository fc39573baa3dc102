#include "builder/store_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

namespace pcrfs::tools {
namespace {

// "PID HOST COMMAND\n": the holder writes it once it has the lock.
std::string Holder(std::string_view command) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "-");
  return std::to_string(::getpid()) + " " + host + " " + std::string(command) + "\n";
}

// Who holds the lock, as read from its file: "pcr merge (pid 123 on host h)". The holder
// writes it just after locking, so a refused writer that came in between waits a moment for
// it. A file of an older pcr ("PID HOST") names no command: that was a build.
std::string DescribeHolder(int fd) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    char buf[300];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string_view text(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (!text.empty() && text.back() == '\n') {
      text.remove_suffix(1);
      std::string_view fields[3];
      for (auto& f : fields) {
        const size_t space = text.find(' ');
        f = text.substr(0, space);
        text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
      }
      const std::string command(fields[2].empty() ? "build" : fields[2]);
      const std::string host(fields[1] == "-" ? "" : fields[1]);
      return "pcr " + command + " (pid " + std::string(fields[0]) +
             (host.empty() ? "" : " on host " + host) + ")";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "pcr writer (pid unknown)";
}

}  // namespace

std::string StoreWriterLock::LockPath(const std::string& store) {
  std::string s = store;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s + ".lock";
}

Result<StoreWriterLock> StoreWriterLock::Acquire(const std::string& store,
                                                 std::string_view command) {
  const std::string path = LockPath(store);
  // The holder unlinks the file before it lets go, so a lock won on a file that has since
  // left its name is no lock at all: check the name still leads to the locked file, else
  // start again on the new one. A few rounds at most, unless writers come and go that fast.
  for (int round = 0; round < 1000; ++round) {
    auto fd = OpenFile(path, O_RDWR | O_CREAT, 0644);
    if (!fd) {
      return Err(
          Status::IOError(store + ": cannot create the writer lock: " + fd.error().message()));
    }
    if (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        return Err(Status::AlreadyExists(
            store + ": another " + DescribeHolder(fd->get()) +
            " is writing this store; wait for it to finish or stop it (lock " + path + ")"));
      }
      return Err(Status::FromErrno(store + ": cannot lock " + path, err));
    }
    struct stat held, named;
    if (::fstat(fd->get(), &held) != 0) return Err(Status::FromErrno(path, errno));
    if (::stat(path.c_str(), &named) != 0) {
      if (errno == ENOENT) continue;
      return Err(Status::FromErrno(path, errno));
    }
    if (held.st_dev != named.st_dev || held.st_ino != named.st_ino) continue;

    StoreWriterLock lock(path, std::move(*fd));  // from here on, failing removes the file
    const std::string holder = Holder(command);
    if (::ftruncate(lock.fd_.get(), 0) != 0) return Err(Status::FromErrno(path, errno));
    PCRFS_RETURN_ERR_IF_ERROR(PwriteFull(lock.fd_.get(), holder.data(), holder.size(), 0, path));
    return lock;
  }
  return Err(Status::IOError(store + ": cannot take the writer lock " + path +
                             ": other writers keep replacing it"));
}

StoreWriterLock::~StoreWriterLock() {
  if (!fd_.valid()) return;
  // Unlink first: a writer waiting behind this one then finds the name gone and retries.
  ::unlink(path_.c_str());
}

}  // namespace pcrfs::tools
