#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include "fs/fuse_ops.h"

#include <fuse3/fuse_lowlevel.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "fs/filesystem.h"

namespace pcrfs::fs {
namespace {

// userdata points to the Filesystem* that the daemon fills in once the store is open.
Filesystem& Fs(fuse_req_t req) { return **static_cast<Filesystem**>(fuse_req_userdata(req)); }

// Set by init when the kernel agreed to skip open/opendir; the first open then answers ENOSYS
// and the kernel opens with keep_cache (and cache_readdir) by itself from then on.
std::atomic<bool> g_no_open{false};
std::atomic<bool> g_no_opendir{false};

// The requests counted by operation (pcrfs_fuse_request_duration_seconds): each handler's
// time from its call to its reply, in one histogram per operation (relaxed atomic adds).
enum class Op {
  kLookup,
  kGetattr,
  kOpen,
  kOpendir,
  kRead,
  kReaddir,
  kReaddirplus,
  kStatfs,
  kGetxattr,
  kListxattr,
  kAccess,
  kIoctl,
  kCount
};
constexpr const char* kOpNames[] = {"lookup",   "getattr",   "open",        "opendir",
                                    "read",     "readdir",   "readdirplus", "statfs",
                                    "getxattr", "listxattr", "access",      "ioctl"};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::kCount));

struct OpLatency {
  metrics::Histogram seconds{metrics::kLatencyBounds};
};
OpLatency g_op_latency[static_cast<size_t>(Op::kCount)];

// Observes the time from its construction to its end into `op`'s histogram.
class OpTimer {
 public:
  explicit OpTimer(Op op) : op_(op), start_(std::chrono::steady_clock::now()) {}
  ~OpTimer() {
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start_;
    g_op_latency[static_cast<size_t>(op_)].seconds.Observe(d.count());
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const Op op_;
  const std::chrono::steady_clock::time_point start_;
};

// Runs a handler body, timed as `op`; if it throws, replies with ENOMEM or EIO. The body must
// not have replied when it throws (every body replies as its last action).
template <typename F>
void Guard(fuse_req_t req, Op op_id, F&& body) {
  OpTimer timer(op_id);
  const char* op = kOpNames[static_cast<size_t>(op_id)];
  try {
    body();
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
  } catch (const std::exception& e) {
    const int saved = errno;
    Log(LogLevel::kError, std::string(op) + ": unexpected error: " + e.what());
    errno = saved;
    fuse_reply_err(req, EIO);
  } catch (...) {
    Log(LogLevel::kError, std::string(op) + ": unexpected error");
    fuse_reply_err(req, EIO);
  }
}

fuse_entry_param EntryParam(const struct stat& st) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof e);
  e.ino = st.st_ino;
  e.attr = st;
  e.attr_timeout = kCacheTimeoutSeconds;
  e.entry_timeout = kCacheTimeoutSeconds;
  return e;
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  // The store is immutable: let the kernel cache everything and skip per-open round trips.
  const Filesystem* fs = *static_cast<Filesystem**>(userdata);
  const ReaddirPlus plus = fs ? fs->options().readdirplus : ReaddirPlus::kNever;
  if (plus != ReaddirPlus::kNever && (conn->capable & FUSE_CAP_READDIRPLUS)) {
    conn->want |= FUSE_CAP_READDIRPLUS;
  } else {
    conn->want &= ~FUSE_CAP_READDIRPLUS;
  }
  if (plus == ReaddirPlus::kAuto && (conn->capable & FUSE_CAP_READDIRPLUS_AUTO)) {
    conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
  } else {
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  }
  if (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) {
    conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
    g_no_open = true;
  }
  if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) {
    conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
    g_no_opendir = true;
  }
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;  // nothing ever changes: never invalidate on mtime
  conn->max_readahead = fs ? fs->options().max_readahead : 1u << 20;
  if (fs != nullptr && fs->options().max_background > 0) {
    conn->max_background = fs->options().max_background;
    conn->congestion_threshold = static_cast<unsigned>(conn->max_background * 3 / 4);
  }
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, Op::kLookup, [&] {
    auto st = Fs(req).Lookup(parent, name);
    if (st) {
      fuse_entry_param e = EntryParam(*st);
      fuse_reply_entry(req, &e);
    } else if (st.error().ToErrno() == ENOENT) {
      // A negative entry (ino 0) with a timeout: the kernel caches the miss.
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.entry_timeout = kCacheTimeoutSeconds;
      fuse_reply_entry(req, &e);
    } else {
      fuse_reply_err(req, st.error().ToErrno());
    }
  });
}

void OpForget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }
void OpForgetMulti(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Guard(req, Op::kGetattr, [&] {
    auto st = Fs(req).GetAttr(ino);
    if (!st) {
      fuse_reply_err(req, st.error().ToErrno());
      return;
    }
    fuse_reply_attr(req, &*st, kCacheTimeoutSeconds);
  });
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, Op::kOpen, [&] {
    if (Status s = Fs(req).Open(ino, fi->flags); !s.ok()) {
      fuse_reply_err(req, s.ToErrno());
      return;
    }
    if (g_no_open) {  // the kernel then sends no OPEN for the other files
      fuse_reply_err(req, ENOSYS);
      return;
    }
    fi->keep_cache = 1;
    fi->noflush = 1;
    fuse_reply_open(req, fi);
  });
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, Op::kOpendir, [&] {
    if (g_no_opendir) {
      fuse_reply_err(req, ENOSYS);
      return;
    }
    if (Status s = Fs(req).OpenDir(ino); !s.ok()) {
      fuse_reply_err(req, s.ToErrno());
      return;
    }
    fi->keep_cache = 1;
    fi->cache_readdir = 1;
    fuse_reply_open(req, fi);
  });
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

thread_local std::vector<uint8_t> tls_read_buffer;

// SetPushUnderReadForTest's; empty but in that test.
std::function<int(uint64_t, const uint8_t*, size_t)> g_push_under_read;

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Guard(req, Op::kRead, [&] {
    if (off < 0) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    if (tls_read_buffer.size() < size) tls_read_buffer.resize(size);
    auto n = Fs(req).Read(ino, static_cast<uint64_t>(off), size, tls_read_buffer.data());
    if (!n) {
      fuse_reply_err(req, n.error().ToErrno());
      return;
    }
    if (g_push_under_read && off == 0 && *n > 0) {
      // What the test waits for: this thread then blocks on the page its READ holds locked.
      Log(LogLevel::kInfo,
          "test hook: thread " + std::to_string(::gettid()) + " pushes the bytes of its own READ");
      g_push_under_read(ino, tls_read_buffer.data(), *n);
    }
    fuse_reply_buf(req, reinterpret_cast<const char*>(tls_read_buffer.data()), *n);
  });
}

void DoReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  Guard(req, plus ? Op::kReaddirplus : Op::kReaddir, [&] {
    std::vector<char> buf(size);
    size_t used = 0;
    Status s = Fs(req).ReadDir(
        ino, static_cast<uint64_t>(off),
        [&](std::string_view name, const struct stat& st, uint64_t next) {
          const std::string n(name);
          size_t need;
          if (plus) {
            fuse_entry_param e = EntryParam(st);
            // "." and "..": no lookup count is taken for them (ino 0); nor for an entry
            // without attributes (st_nlink 0: a form=baseline JPEG whose size is not known),
            // which the kernel then lists as a plain readdir entry.
            if (n == "." || n == ".." || st.st_nlink == 0) e.ino = 0;
            need = fuse_add_direntry_plus(req, buf.data() + used, size - used, n.c_str(), &e,
                                          static_cast<off_t>(next));
          } else {
            need = fuse_add_direntry(req, buf.data() + used, size - used, n.c_str(), &st,
                                     static_cast<off_t>(next));
          }
          if (need > size - used) return false;
          used += need;
          return true;
        },
        /*attrs=*/plus);
    if (!s.ok() && used == 0) {
      fuse_reply_err(req, s.ToErrno());
      return;
    }
    fuse_reply_buf(req, buf.data(), used);
  });
}

// Python's open() calls isatty(), an ioctl(TCGETS) that the kernel forwards to the daemon for
// every file (FUSE has no flag that answers it in the kernel; it caches no ioctl answer, and
// turns an ENOSYS reply into ENOTTY each time). No file here is a terminal or supports any
// ioctl, so the answer is ENOTTY at once: no lookup, no allocation (docs/semantics.md).
void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned,
             const void*, size_t, size_t) {
  OpTimer timer(Op::kIoctl);
  fuse_reply_err(req, ENOTTY);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  DoReaddir(req, ino, size, off, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  DoReaddir(req, ino, size, off, true);
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  Guard(req, Op::kStatfs, [&] {
    struct statvfs sv = Fs(req).StatFs();
    fuse_reply_statfs(req, &sv);
  });
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Guard(req, Op::kGetxattr, [&] {
    auto v = Fs(req).GetXattr(ino, name);
    if (!v) {
      fuse_reply_err(req, v.error().ToErrno());
    } else if (size == 0) {
      fuse_reply_xattr(req, v->size());
    } else if (size < v->size()) {
      fuse_reply_err(req, ERANGE);
    } else {
      fuse_reply_buf(req, v->data(), v->size());
    }
  });
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Guard(req, Op::kListxattr, [&] {
    auto names = Fs(req).ListXattr(ino);
    if (!names) {
      fuse_reply_err(req, names.error().ToErrno());
      return;
    }
    std::string list;
    for (const auto& n : *names) {
      list += n;
      list.push_back('\0');
    }
    if (size == 0) {
      fuse_reply_xattr(req, list.size());
    } else if (size < list.size()) {
      fuse_reply_err(req, ERANGE);
    } else {
      fuse_reply_buf(req, list.data(), list.size());
    }
  });
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  Guard(req, Op::kAccess, [&] {
    auto st = Fs(req).GetAttr(ino);
    if (!st) {
      fuse_reply_err(req, st.error().ToErrno());
    } else {
      fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
    }
  });
}

// Everything that would modify the filesystem: EROFS. (The mount is also read-only, so the
// kernel normally answers these itself.)
void RoSetattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void RoMknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { fuse_reply_err(req, EROFS); }
void RoMkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { fuse_reply_err(req, EROFS); }
void RoUnlink(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoSymlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoRename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  fuse_reply_err(req, EROFS);
}
void RoLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoWrite(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void RoSetxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
  fuse_reply_err(req, EROFS);
}
void RoRemovexattr(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoCreate(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void RoFallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.open = OpOpen;
  ops.opendir = OpOpendir;
  ops.release = OpRelease;
  ops.releasedir = OpRelease;
  ops.read = OpRead;
  ops.ioctl = OpIoctl;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.statfs = OpStatfs;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.access = OpAccess;
  ops.setattr = RoSetattr;
  ops.mknod = RoMknod;
  ops.mkdir = RoMkdir;
  ops.unlink = RoUnlink;
  ops.rmdir = RoUnlink;
  ops.symlink = RoSymlink;
  ops.rename = RoRename;
  ops.link = RoLink;
  ops.write = RoWrite;
  ops.setxattr = RoSetxattr;
  ops.removexattr = RoRemovexattr;
  ops.create = RoCreate;
  ops.fallocate = RoFallocate;
  return ops;
}

}  // namespace

void SetPushUnderReadForTest(std::function<int(uint64_t, const uint8_t*, size_t)> push) {
  g_push_under_read = std::move(push);
}

const fuse_lowlevel_ops& FuseOperations() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

void AppendFuseMetrics(metrics::Exposition* out) {
  std::vector<metrics::Histogram::Snapshot> ops;
  for (const OpLatency& l : g_op_latency) ops.push_back(l.seconds.snapshot());
  out->Family("pcrfs_fuse_requests_total", metrics::Exposition::Type::kCounter,
              "FUSE requests answered, by operation.");
  for (size_t i = 0; i < ops.size(); ++i) {
    uint64_t n = 0;
    for (uint64_t c : ops[i].counts) n += c;
    out->Sample({{"op", kOpNames[i]}}, static_cast<double>(n));
  }
  out->Family("pcrfs_fuse_request_duration_seconds", metrics::Exposition::Type::kHistogram,
              "Time from a FUSE request's arrival in the daemon to its reply, by operation.");
  for (size_t i = 0; i < ops.size(); ++i) out->HistogramSample({{"op", kOpNames[i]}}, ops[i]);
}

}  // namespace pcrfs::fs
