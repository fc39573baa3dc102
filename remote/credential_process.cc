#include "remote/credential_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "remote/simple_http.h"

extern char** environ;

namespace pcrfs {

std::string OneLine(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n' || c == '\r') {
      if (!out.empty()) break;  // the first line only
      continue;
    }
    out.push_back(u >= 0x20 && u < 0x7f ? c : '?');
  }
  return out;
}

Result<std::vector<std::string>> SplitCommandLine(std::string_view command) {
  // Python's shlex in POSIX mode with whitespace_split and no comments (shlex.split), the
  // states named as shlex names them: ' ' between words, 'a' in a word, a quote inside that
  // quote, '\\' after a backslash (`escaped_from` is where it returns).
  std::vector<std::string> words;
  std::string word;
  bool quoted = false;  // the word had quotes: '' is an empty word
  char state = ' ', escaped_from = 'a';
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  for (char c : command) {
    switch (state) {
      case ' ':
      case 'a':
        if (is_space(c)) {
          if (state == 'a' || quoted) words.push_back(std::move(word));
          word.clear();
          quoted = false;
          state = ' ';
        } else if (c == '\\') {
          escaped_from = 'a';
          state = '\\';
        } else if (c == '\'' || c == '"') {
          quoted = true;
          state = c;
        } else {
          word.push_back(c);
          state = 'a';
        }
        break;
      case '\'':
      case '"':
        if (c == state) {
          state = 'a';
        } else if (c == '\\' && state == '"') {
          escaped_from = '"';
          state = '\\';
        } else {
          word.push_back(c);
        }
        break;
      default:  // '\\': inside double quotes a backslash stays unless it escapes '"' or '\'
        if (escaped_from == '"' && c != '"' && c != '\\') word.push_back('\\');
        word.push_back(c);
        state = escaped_from;
        break;
    }
  }
  if (state == '\'' || state == '"') {
    return Err(Status::InvalidArgument("credential_process: no closing quotation"));
  }
  if (state == '\\') {
    return Err(Status::InvalidArgument("credential_process: no escaped character"));
  }
  if (state == 'a' || quoted) words.push_back(std::move(word));
  if (words.empty()) return Err(Status::InvalidArgument("credential_process is empty"));
  return words;
}

namespace {

// Waits until `pid` has exited (not reaping it: its pid, and so its process group's id, stay
// reserved) or until `deadline`; true if it exited.
bool WaitExited(pid_t pid, int pidfd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (pidfd >= 0) {
      pollfd p = {pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    } else {
      ::usleep(10000);  // no pidfd (a kernel before 5.3): poll the state
    }
  }
}

}  // namespace

Result<std::string> RunCredentialProcess(const std::string& command,
                                         std::chrono::milliseconds timeout) {
  // botocore runs the words of the command (shlex.split), no shell.
  auto words = SplitCommandLine(command);
  if (!words) return Err(words.error());
  std::vector<char*> argv;
  for (std::string& w : *words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return Err(Status::FromErrno("credential_process: pipe", errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    return Err(Status::FromErrno("credential_process: pipe", e));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  // Its own process group: at the deadline the helper and everything it started are killed.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return Err(Status::FromErrno("credential_process: cannot run " + OneLine((*words)[0]), rc));
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  std::string stdout_text, stderr_text;
  bool overflow = false, timed_out = false, exited = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {pidfd, POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int n =
        ::poll(fds, pidfd >= 0 ? 3 : 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    if (fds[2].fd >= 0 && fds[2].revents != 0 && !exited) {
      // The helper is done: what it left running goes now (a child holding the pipes open
      // would keep this loop waiting until the deadline).
      exited = true;
      ::kill(-pid, SIGKILL);
      fds[2].fd = -1;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[k].fd, buf, sizeof(buf));
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
        continue;
      }
      std::string& dst = k == 0 ? stdout_text : stderr_text;
      const size_t cap = k == 0 ? kSimpleHttpMaxBody : 4096;
      if (dst.size() + static_cast<size_t>(got) > cap) {
        if (k == 0) overflow = true;
        dst.append(buf, cap - std::min(cap, dst.size()));
      } else {
        dst.append(buf, static_cast<size_t>(got));
      }
    }
    if (overflow) break;
  }
  for (int k = 0; k < 2; ++k) {
    if (fds[k].fd >= 0) ::close(fds[k].fd);
  }
  // The wait is bounded too: a helper that closed its output and sleeps is killed at the
  // deadline. Its group is killed before it is reaped (its pid, the group's id, still held).
  if (!timed_out && !overflow && !WaitExited(pid, pidfd, deadline)) timed_out = true;
  ::kill(-pid, SIGKILL);
  if (pidfd >= 0) ::close(pidfd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Err(Status::IOError("credential_process did not finish within " +
                               std::to_string(timeout.count() / 1000) + " s"));
  }
  if (overflow) return Err(Status::IOError("credential_process printed more than 1 MiB"));
  // Its stderr: for the log (RenewingCredentials cuts it off what others may read).
  const std::string why = OneLine(stderr_text);
  const std::string said = why.empty() ? "" : std::string(kCredentialProcessSaid) + why;
  if (WIFSIGNALED(status)) {
    return Err(Status::IOError("credential_process killed by signal " +
                               std::to_string(WTERMSIG(status)) + said));
  }
  if (WEXITSTATUS(status) != 0) {
    return Err(Status::IOError("credential_process exited with status " +
                               std::to_string(WEXITSTATUS(status)) + said));
  }
  return stdout_text;
}

}  // namespace pcrfs
