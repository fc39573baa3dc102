#include "builder/archive_source.h"

#include <archive.h>
#include <archive_entry.h>
#include <locale.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/mutex.h"
#include "index/entry.h"

namespace pcrfs::tools {
namespace {

constexpr size_t kReadBlock = size_t{1} << 20;  // bytes per read of the archive file
constexpr int kMaxNesting = 8;                  // deeper archives stay files

// What pass 1 decided for the seq-th member met in the walk, so pass 2 does the same.
constexpr uint32_t kSkip = UINT32_MAX;            // not stored (a problem, or a folder entry)
constexpr uint32_t kNested = UINT32_MAX - 1;      // an archive expanded into a folder
constexpr uint32_t kKeepAsFile = UINT32_MAX - 2;  // (TryNested) not an archive: a file
// any other value: the file node the member's bytes belong to

struct ArchiveDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveDeleter>;

ArchivePtr NewReader() {
  ArchivePtr a(archive_read_new());
  if (!a) return a;
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_format_zip(a.get());  // seekable for the outer file, streamable inside
  return a;
}

std::string ErrorOf(archive* a) {
  const char* s = archive_error_string(a);
  return s != nullptr ? s : "unknown libarchive error";
}

// Reading an archive member as an archive: the inner reader pulls the outer member's bytes.
struct NestedInput {
  archive* outer;
  std::vector<uint8_t> buf = std::vector<uint8_t>(size_t{64} << 10);
};

la_ssize_t NestedRead(archive* inner, void* ctx, const void** out) {
  auto* in = static_cast<NestedInput*>(ctx);
  const la_ssize_t n = archive_read_data(in->outer, in->buf.data(), in->buf.size());
  if (n < 0) {
    archive_set_error(inner, EIO, "%s", ErrorOf(in->outer).c_str());
    return -1;
  }
  *out = in->buf.data();
  return n;
}

// libarchive's callbacks over an ArchiveStream.
struct StreamInput {
  std::unique_ptr<ArchiveStream> stream;
};

la_ssize_t StreamRead(archive* a, void* ctx, const void** out) {
  auto* in = static_cast<StreamInput*>(ctx);
  auto got = in->stream->Read();
  if (!got) {
    archive_set_error(a, EIO, "%s", got.error().message().c_str());
    return -1;
  }
  *out = got->data();
  return static_cast<la_ssize_t>(got->size());
}

la_int64_t StreamSkip(archive* a, void* ctx, la_int64_t request) {
  auto* in = static_cast<StreamInput*>(ctx);
  if (request <= 0) return 0;
  auto skipped = in->stream->Skip(static_cast<uint64_t>(request));
  if (!skipped) {
    archive_set_error(a, EIO, "%s", skipped.error().message().c_str());
    return ARCHIVE_FATAL;
  }
  return static_cast<la_int64_t>(*skipped);
}

int StreamClose(archive*, void* ctx) {
  delete static_cast<StreamInput*>(ctx);
  return ARCHIVE_OK;
}

// Opens `a` on the local file `path`, or on a new stream of `opener`. Not ARCHIVE_OK: the error
// is in archive_error_string(a).
int OpenInput(archive* a, const std::string& path, const ArchiveStreamOpener& opener) {
  if (!opener) return archive_read_open_filename(a, path.c_str(), kReadBlock);
  auto stream = opener();
  if (!stream) {
    archive_set_error(a, EIO, "%s", stream.error().message().c_str());
    return ARCHIVE_FATAL;
  }
  auto* in = new StreamInput{std::move(*stream)};
  archive_read_set_callback_data(a, in);
  archive_read_set_read_callback(a, StreamRead);
  archive_read_set_skip_callback(a, StreamSkip);
  archive_read_set_close_callback(a, StreamClose);
  return archive_read_open1(a);  // calls StreamClose (freeing `in`) on failure and at the end
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  if (s.size() <= n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::tolower(static_cast<unsigned char>(s[s.size() - n + i])) != suffix[i]) return false;
  }
  return true;
}

}  // namespace

std::string NestedFolderName(const std::string& name) {
  for (const char* ext : {".tar.gz", ".tgz", ".tar", ".zip"}) {
    if (EndsWith(name, ext)) return name.substr(0, name.size() - std::strlen(ext));
  }
  return {};
}

Status ProbeArchive(const std::string& path, const ArchiveStreamOpener& opener) {
  struct stat st;
  if (!opener && ::stat(path.c_str(), &st) != 0)
    return Status::FromErrno(path + ": cannot use as source", errno);
  if (!opener && !S_ISREG(st.st_mode))
    return Status::InvalidArgument(path + ": not a directory or an archive");
  ArchivePtr a = NewReader();
  if (!a) return Status::ResourceExhausted(path + ": out of memory");
  if (OpenInput(a.get(), path, opener) != ARCHIVE_OK) {
    return Status::InvalidArgument(path + ": not a directory or a readable archive (" +
                                   ErrorOf(a.get()) + ")");
  }
  archive_entry* e;
  const int r = archive_read_next_header(a.get(), &e);
  if (r == ARCHIVE_EOF) return Status::InvalidArgument(path + ": source archive is empty");
  if (r < ARCHIVE_WARN) {
    return Status::InvalidArgument(path + ": not a directory or a readable archive (" +
                                   ErrorOf(a.get()) + ")");
  }
  return Status::OK();
}

struct ArchiveSource::Impl {
  std::string path;
  ArchiveStreamOpener opener;  // empty: `path` is a local file
  bool nested = true;
  SourceTree* tree = nullptr;                 // pass 1 only
  const ListingProgress* progress = nullptr;  // pass 1 only
  uint64_t listed_bytes = 0;                  // pass 1: of the file members so far
  std::vector<uint32_t> plan;                 // by member sequence number
  size_t seq = 0;                             // members met so far in this pass
  bool second_pass = false;
  // Pass 1: (parent, name) -> node, to find folders and duplicates; dropped after pass 1.
  std::unordered_multimap<uint64_t, uint32_t> names;
  std::vector<bool> implied;  // by node: a folder no header described

  // Pass 2, the hand-off between the reader thread and OpenMember.
  Mutex mu;
  CondVar cv;
  std::vector<uint32_t> want GUARDED_BY(mu);  // once the thread runs
  size_t serving GUARDED_BY(mu) = 0;          // the turn handed out or next to be
  bool ready GUARDED_BY(mu) = false;          // want[serving] is positioned in `current`
  archive* current GUARDED_BY(mu) = nullptr;
  bool finished GUARDED_BY(mu) = false;  // the reader has stopped
  std::string finish_error GUARDED_BY(mu);
  bool cancelled GUARDED_BY(mu) = false;
  std::thread reader;

  static uint64_t Key(uint32_t parent, std::string_view name) {
    uint64_t h = 0xcbf29ce484222325ull ^ parent;
    for (unsigned char c : name) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    return h;
  }
  // The child `name` of folder `parent`, or -1.
  int64_t Find(uint32_t parent, const std::string& name) const {
    auto [b, e] = names.equal_range(Key(parent, name));
    for (auto it = b; it != e; ++it) {
      const SourceNode& n = tree->nodes[it->second];
      if (n.parent == parent && tree->Name(n) == name) return it->second;
    }
    return -1;
  }
  uint32_t AddNode(uint32_t parent, const std::string& name, bool is_dir) {
    const uint32_t id = tree->AddChild(parent, name, is_dir);
    names.emplace(Key(parent, name), id);
    implied.push_back(is_dir);
    return id;
  }
  void Problem(uint32_t dir, const std::string& rel, std::string reason) {
    const std::string base = tree->RelPath(tree->nodes[dir]);
    const std::string p = base.empty() ? rel : rel.empty() ? base : base + "/" + rel;
    tree->problems.push_back({p.empty() ? "." : p, std::move(reason)});
  }

  enum class WalkEnd { kDone, kNotArchive, kStopped };

  // Visits every member of `a`, which land under folder node `dir`. kNotArchive: the first
  // header could not be read (nothing was recorded).
  WalkEnd Walk(archive* a, uint32_t dir, int depth) {
    bool first = true;
    for (;;) {
      archive_entry* e;
      const int r = archive_read_next_header(a, &e);
      if (r == ARCHIVE_EOF) return WalkEnd::kDone;
      if (r < ARCHIVE_WARN) {
        if (first && depth > 0) return WalkEnd::kNotArchive;
        if (!second_pass) {
          Problem(dir, "",
                  "archive damaged or truncated after " +
                      std::string(first ? "no" : "its last readable") +
                      " member; the rest is not stored: " + ErrorOf(a));
        }
        return WalkEnd::kDone;
      }
      first = false;
      const size_t s = seq++;
      if (second_pass) {
        if (s >= plan.size()) return WalkEnd::kDone;  // the archive changed under us
        if (plan[s] == kNested) {
          if (!Descend(a, dir, depth, nullptr)) return WalkEnd::kStopped;
        } else if (plan[s] != kSkip && !HandOut(a, plan[s])) {
          return WalkEnd::kStopped;
        }
        continue;
      }
      plan.push_back(kSkip);  // the entries of a nested archive follow this one
      plan[s] = Classify(a, e, dir, depth);
    }
  }

  // Pass 1: what to do with member `e` of an archive landing in folder `dir`.
  uint32_t Classify(archive* a, archive_entry* e, uint32_t dir, int depth) {
    // UTF-8 when the archive says what its names are (pax, zip's UTF-8 flag), else raw bytes:
    // in the C locale libarchive cannot convert a non-ASCII name and returns null.
    const char* raw = archive_entry_pathname_utf8(e);
    if (raw == nullptr) raw = archive_entry_pathname(e);
    const std::string name = raw != nullptr ? raw : "";
    std::vector<std::string> parts;
    if (!SplitMemberName(dir, name, &parts)) return kSkip;
    if (parts.empty()) return kSkip;  // "./": the folder itself
    if (!IsStorableType(e, dir, name)) return kSkip;
    const int64_t parent = MakeFoldersOnPath(dir, name, parts);
    if (parent < 0) return kSkip;
    const std::string& leaf = parts.back();
    const int64_t found = Find(static_cast<uint32_t>(parent), leaf);
    if (archive_entry_filetype(e) == AE_IFDIR) {
      if (found >= 0 && !(tree->nodes[found].is_dir && implied[found])) {
        Problem(dir, name, "duplicate name (the first one is stored)");
        return kSkip;
      }
      const uint32_t node = found >= 0 ? static_cast<uint32_t>(found)
                                       : AddNode(static_cast<uint32_t>(parent), leaf, true);
      implied[node] = false;
      SetAttributes(e, &tree->nodes[node]);
      return kSkip;
    }
    if (found >= 0) {
      Problem(dir, name, "duplicate name (the first one is stored)");
      return kSkip;
    }
    if (nested && depth < kMaxNesting) {
      const uint32_t plan = TryNested(a, e, dir, depth, static_cast<uint32_t>(parent), leaf, name);
      if (plan != kKeepAsFile) return plan;
    }
    return AddFile(a, e, static_cast<uint32_t>(parent), leaf);
  }

  // The parts of a member's name, "." and empty parts left out; false (reported) for a name
  // that is empty, absolute, leaves the tree or holds an invalid file name.
  bool SplitMemberName(uint32_t dir, const std::string& name, std::vector<std::string>* parts) {
    if (name.empty()) {
      Problem(dir, "(member without a name)", "not stored");
      return false;
    }
    if (name[0] == '/') {
      Problem(dir, name, "absolute path in the archive (not stored)");
      return false;
    }
    size_t at = 0;
    while (at <= name.size()) {
      size_t slash = name.find('/', at);
      if (slash == std::string::npos) slash = name.size();
      std::string part = name.substr(at, slash - at);
      at = slash + 1;
      if (part.empty() || part == ".") continue;
      if (part == "..") {
        Problem(dir, name, "'..' in the member name would leave the tree (not stored)");
        return false;
      }
      if (!index::IsValidName(part)) {
        Problem(dir, name, "not a valid file name (not stored)");
        return false;
      }
      parts->push_back(std::move(part));
    }
    return true;
  }

  // Only regular files and folders are stored; links and other types are reported.
  bool IsStorableType(archive_entry* e, uint32_t dir, const std::string& name) {
    const mode_t type = archive_entry_filetype(e);
    if (archive_entry_hardlink(e) != nullptr) {
      Problem(dir, name,
              std::string("hard link to ") + archive_entry_hardlink(e) + " (links are not stored)");
      return false;
    }
    if (type == AE_IFLNK) {
      const char* to = archive_entry_symlink(e);
      Problem(dir, name,
              std::string("symbolic link to ") + (to ? to : "?") + " (links are not stored)");
      return false;
    }
    if (type != AE_IFDIR && type != AE_IFREG) {
      Problem(dir, name, "not a regular file or folder (not stored)");
      return false;
    }
    return true;
  }

  // The folders on the way to the leaf of `parts`, made as needed: the leaf's parent, or -1
  // (reported) where one of them is a file of the archive.
  int64_t MakeFoldersOnPath(uint32_t dir, const std::string& name,
                            const std::vector<std::string>& parts) {
    uint32_t parent = dir;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const int64_t found = Find(parent, parts[i]);
      if (found < 0) {
        parent = AddNode(parent, parts[i], true);
      } else if (!tree->nodes[found].is_dir) {
        Problem(dir, name, "a folder on its path is a file of the archive (not stored)");
        return -1;
      } else {
        parent = static_cast<uint32_t>(found);
      }
    }
    return parent;
  }

  // A member that may be an archive itself: expanded into a folder named after it (kNested),
  // kKeepAsFile when it is not an archive, or kSkip (reported) when it cannot be kept either.
  uint32_t TryNested(archive* a, archive_entry* e, uint32_t dir, int depth, uint32_t parent,
                     const std::string& leaf, const std::string& name) {
    const std::string folder = NestedFolderName(leaf);
    if (folder.empty() || !index::IsValidName(folder)) return kKeepAsFile;
    const int64_t existing = Find(parent, folder);
    if (existing >= 0 && !tree->nodes[existing].is_dir) return kKeepAsFile;
    const bool made = existing < 0;
    const uint32_t node = made ? AddNode(parent, folder, true) : static_cast<uint32_t>(existing);
    if (made) {
      implied[node] = false;
      SetAttributes(e, &tree->nodes[node]);
      tree->nodes[node].mode = 0755;
    }
    bool not_archive = false;
    Descend(a, node, depth, &not_archive);
    if (!not_archive) return kNested;
    if (made) {  // nothing was added under it: take it back
      tree->MutableChildren(parent).pop_back();
      tree->nodes.pop_back();
      implied.pop_back();
      auto [b, en] = names.equal_range(Key(parent, folder));
      for (auto it = b; it != en; ++it) {
        if (it->second == node) {
          names.erase(it);
          break;
        }
      }
    }
    // Kept as a file. Its size must come from the header: the data was read already.
    if (!archive_entry_size_is_set(e)) {
      Problem(dir, name, "neither an archive nor a file of known size (not stored)");
      return kSkip;
    }
    return kKeepAsFile;
  }

  // A regular member stored as file `leaf` of folder `parent`.
  uint32_t AddFile(archive* a, archive_entry* e, uint32_t parent, const std::string& leaf) {
    const uint32_t node = AddNode(parent, leaf, false);
    SetAttributes(e, &tree->nodes[node]);
    if (archive_entry_size_is_set(e)) {
      tree->nodes[node].size =
          static_cast<uint64_t>(std::max<la_int64_t>(0, archive_entry_size(e)));
    } else {  // a streamed zip member: count its bytes
      std::vector<uint8_t> buf(size_t{64} << 10);
      uint64_t total = 0;
      for (;;) {
        const la_ssize_t n = archive_read_data(a, buf.data(), buf.size());
        if (n <= 0) break;
        total += static_cast<uint64_t>(n);
      }
      tree->nodes[node].size = total;
    }
    tree->files.push_back(node);
    listed_bytes += tree->nodes[node].size;
    if (progress != nullptr && *progress) (*progress)(tree->files.size(), listed_bytes);
    return node;
  }

  static void SetAttributes(archive_entry* e, SourceNode* n) {
    const uint32_t perm = archive_entry_perm(e) & 07777;
    if (perm != 0) n->mode = static_cast<uint16_t>(perm);
    if (archive_entry_mtime_is_set(e)) {
      n->mtime_sec = archive_entry_mtime(e);
      n->mtime_nsec =
          static_cast<uint32_t>(std::clamp<long>(archive_entry_mtime_nsec(e), 0, 999999999));
    }
  }

  // Reads the member `a` is at as an archive whose members land in folder `dir`. Returns false
  // if the walk was stopped (pass 2 cancelled).
  bool Descend(archive* a, uint32_t dir, int depth, bool* not_archive) {
    ArchivePtr inner = NewReader();
    if (!inner) {
      if (!second_pass) Problem(dir, "", "out of memory opening the nested archive");
      return true;
    }
    NestedInput in{a};
    if (archive_read_open(inner.get(), &in, nullptr, NestedRead, nullptr) != ARCHIVE_OK) {
      if (not_archive != nullptr) *not_archive = true;
      return true;
    }
    const WalkEnd end = Walk(inner.get(), dir, depth + 1);
    if (end == WalkEnd::kNotArchive && not_archive != nullptr) *not_archive = true;
    return end != WalkEnd::kStopped;
  }

  // Pass 2: the reader thread is at the member of file node `node`. If it is the next one
  // wanted, hands it out and waits for its release. False: cancelled.
  bool HandOut(archive* a, uint32_t node) {
    MutexLock l(&mu);
    if (cancelled) return false;
    if (serving >= want.size() || want[serving] != node) return true;  // not wanted (resume)
    current = a;
    ready = true;
    cv.SignalAll();
    while (ready && !cancelled) cv.Wait(&mu);
    return !cancelled;
  }

  void ReadAll() {
    std::string error;
    ArchivePtr a = NewReader();
    if (!a) {
      error = "out of memory";
    } else if (OpenInput(a.get(), path, opener) != ARCHIVE_OK) {
      error = ErrorOf(a.get());
    } else {
      Walk(a.get(), 0, 0);
      error = ErrorOf(a.get());
    }
    MutexLock l(&mu);
    finished = true;
    finish_error = path + ": member not found on the second read of the archive (" + error + ")";
    cv.SignalAll();
  }
};

ArchiveSource::ArchiveSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ArchiveSource::~ArchiveSource() {
  Cancel();
  if (impl_->reader.joinable()) impl_->reader.join();
}

Result<std::unique_ptr<ArchiveSource>> ArchiveSource::Open(const std::string& path, bool nested,
                                                           const ListingProgress& progress,
                                                           ArchiveStreamOpener opener) {
  if (Status s = ProbeArchive(path, opener); !s.ok()) return Err(std::move(s));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->opener = std::move(opener);
  impl->nested = nested;
  std::unique_ptr<ArchiveSource> src(new ArchiveSource(std::move(impl)));
  Impl& m = *src->impl_;
  SourceTree& tree = src->tree_;
  tree.root = path;
  struct stat st;
  if (!m.opener && ::stat(path.c_str(), &st) != 0) return Err(Status::FromErrno(path, errno));
  SourceNode root;
  root.is_dir = true;
  root.mode = 0755;
  tree.nodes.push_back(root);
  m.implied.push_back(true);
  m.tree = &tree;
  m.progress = &progress;
  ArchivePtr a = NewReader();
  if (!a) return Err(Status::ResourceExhausted(path + ": out of memory"));
  if (OpenInput(a.get(), path, m.opener) != ARCHIVE_OK) {
    return Err(Status::IOError(path + ": " + ErrorOf(a.get())));
  }
  {
    // Member names are read as UTF-8 whatever the process's locale: in the C locale libarchive
    // cannot convert a zip's or pax header's non-ASCII name. This thread only, for pass 1.
    locale_t utf8 = ::newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    locale_t old = utf8 != static_cast<locale_t>(0) ? ::uselocale(utf8) : static_cast<locale_t>(0);
    m.Walk(a.get(), 0, 0);
    if (utf8 != static_cast<locale_t>(0)) {
      ::uselocale(old);
      ::freelocale(utf8);
    }
  }
  // Folders no header described get the newest mtime below them: a function of the content
  // alone, so the same archive gives the same store wherever it was copied.
  for (size_t i = tree.nodes.size(); i-- > 1;) {
    const SourceNode& n = tree.nodes[i];
    SourceNode& p = tree.nodes[n.parent];
    if (m.implied[n.parent] && (n.mtime_sec > p.mtime_sec ||
                                (n.mtime_sec == p.mtime_sec && n.mtime_nsec > p.mtime_nsec))) {
      p.mtime_sec = n.mtime_sec;
      p.mtime_nsec = n.mtime_nsec;
    }
  }
  tree.SortChildren();
  m.names = {};
  m.implied = {};
  m.tree = nullptr;
  m.progress = nullptr;
  return src;
}

void ArchiveSource::StartReading(std::vector<uint32_t> want) {
  {
    MutexLock l(&impl_->mu);  // uncontended: the reader thread starts below
    impl_->want = std::move(want);
  }
  impl_->second_pass = true;
  impl_->seq = 0;
  impl_->reader = std::thread([this] { impl_->ReadAll(); });
}

Result<std::unique_ptr<ArchiveMember>> ArchiveSource::OpenMember(size_t turn) {
  Impl& m = *impl_;
  MutexLock l(&m.mu);
  m.cv.Wait(&m.mu, [&]() REQUIRES(m.mu) {
    return m.cancelled || m.finished || (m.ready && m.serving == turn);
  });
  if (m.cancelled) return Err(Status::IOError(m.path + ": build stopped"));
  if (!(m.ready && m.serving == turn)) return Err(Status::IOError(m.finish_error));
  return std::unique_ptr<ArchiveMember>(new ArchiveMember(this, m.current));
}

void ArchiveSource::Release() {
  MutexLock l(&impl_->mu);
  impl_->ready = false;
  impl_->current = nullptr;
  ++impl_->serving;
  impl_->cv.SignalAll();
}

void ArchiveSource::Cancel() {
  MutexLock l(&impl_->mu);
  impl_->cancelled = true;
  impl_->cv.SignalAll();
}

ArchiveMember::~ArchiveMember() { source_->Release(); }

Status ArchiveMember::ReadExact(std::span<uint8_t> dst) {
  auto* a = static_cast<archive*>(archive_);
  size_t got = 0;
  while (got < dst.size()) {
    const la_ssize_t n = archive_read_data(a, dst.data() + got, dst.size() - got);
    if (n < 0) return Status::IOError(source_->impl_->path + ": " + ErrorOf(a));
    if (n == 0) {
      return Status::IOError(source_->impl_->path + ": member ends early (truncated archive?)");
    }
    got += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace pcrfs::tools
