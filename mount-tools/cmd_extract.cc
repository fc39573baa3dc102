// pcr extract STORE DIR [--scans K] [--jobs N]
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/mutex.h"
#include "common/parallel.h"
#include "index/store.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

namespace {

// The store's tree as paths below DIR: entries in inode order (breadth-first, so a folder comes
// before everything in it), each with its path relative to the root ("" for the root).
struct TreeItem {
  index::Entry entry;
  std::string path;
};

Result<std::vector<TreeItem>> ListTree(const index::IndexReader& idx) {
  std::vector<TreeItem> items;
  items.reserve(idx.NumEntries());
  for (uint64_t ino = index::kRootIno; ino <= idx.NumEntries(); ++ino) {
    auto e = idx.Get(ino);
    if (!e) return Err(e.error());
    std::string path;
    if (ino != index::kRootIno) {
      // Parents have smaller inode numbers than their children (the builder numbers
      // breadth-first); anything else is a damaged index, never a path outside DIR.
      if (e->parent < index::kRootIno || e->parent >= ino || !index::IsValidName(e->name) ||
          !items[e->parent - 1].entry.is_dir()) {
        return Err(
            Status::Corruption("index entry " + std::to_string(ino) + ": bad parent or name"));
      }
      const std::string& parent = items[e->parent - 1].path;
      path = parent.empty() ? e->name : parent + "/" + e->name;
    }
    items.push_back({std::move(*e), std::move(path)});
  }
  return items;
}

std::string Join(const std::string& dir, const std::string& rel) {
  return rel.empty() ? dir : dir + "/" + rel;
}

// Writes one file at level k to `dest`, created new (O_EXCL: never over an existing file), then
// gives it the source's permission bits and modification time. A file that fails is removed:
// DIR never holds a partial file.
Status ExtractFile(const index::Store& store, const index::Entry& e, int k,
                   const std::string& dest) {
  auto fd = OpenFile(dest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (!fd) return fd.error();
  Status s = store.ReadFileTo(e, k, [&](std::span<const uint8_t> bytes) {
    return WriteFull(fd->get(), bytes.data(), bytes.size(), dest);
  });
  const timespec times[2] = {{0, UTIME_OMIT},
                             {static_cast<time_t>(e.mtime_sec), static_cast<long>(e.mtime_nsec)}};
  if (s.ok() && (fchmod(fd->get(), e.mode & 0777) != 0 || futimens(fd->get(), times) != 0)) {
    s = Status::IOError(dest + ": " + std::strerror(errno));
  }
  if (!s.ok()) unlink(dest.c_str());
  return s;
}

// DIR must be new or an empty folder: extract never writes over anything.
Status PrepareOutputDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) == 0) return Status::OK();
  if (errno != EEXIST) return Status::IOError(dir + ": " + std::strerror(errno));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + ": exists and is not a folder");
  }
  DIR* d = opendir(dir.c_str());
  if (!d) return Status::IOError(dir + ": " + std::strerror(errno));
  bool empty = true;
  while (const dirent* de = readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) empty = false;
  }
  closedir(d);
  if (!empty) return Status::InvalidArgument(dir + ": not empty (extract never writes over files)");
  return Status::OK();
}

}  // namespace

int RunExtract(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr extract STORE DIR [--scans K]\n\n"
      "Writes every folder and file of the store at level K into DIR (a new or empty folder), as\n"
      "the mount shows them: JPEGs at level K, other files byte for byte, the source's permission\n"
      "bits and modification times. Every block is checked; a file that fails is named and left\n"
      "out, never written partly.\n\noptions");
  int scans = 10;
  unsigned jobs = 0;
  opts.add_options()("help,h", "show this help")(
      "scans,k", po::value<int>(&scans)->default_value(10), "level: scan groups 1..10")(
      "jobs,j", po::value<unsigned>(&jobs)->default_value(0), "threads (0: all cores)");
  std::string store_dir, out_dir;
  po::variables_map vm;
  if (auto exit =
          ParseCommandLine("extract", args, opts, {{"store", &store_dir}, {"dir", &out_dir}},
                           "0 done, 1 a file could not be read or written, 2 bad arguments", &vm)) {
    return *exit;
  }
  if (store_dir.empty() || out_dir.empty()) {
    std::fprintf(stderr, "pcr extract: STORE and DIR are required (see pcr extract --help)\n");
    return 2;
  }
  if (scans < 1 || scans > 10) {
    std::fprintf(stderr, "pcr extract: --scans must be between 1 and 10\n");
    return 2;
  }
  auto store = OpenStore(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr extract: %s\n", store.error().message().c_str());
    return 2;
  }
  auto tree = ListTree((*store)->index());
  if (!tree) {
    std::fprintf(stderr, "pcr extract: %s: %s\n", ShownStore(store_dir).c_str(),
                 tree.error().message().c_str());
    return 1;
  }
  if (Status s = PrepareOutputDir(out_dir); !s.ok()) {
    std::fprintf(stderr, "pcr extract: %s\n", s.message().c_str());
    return 2;
  }
  // Folders first (owner-writable while files go in), then the files in parallel, then the
  // folders' own modes and times, deepest first, so writing into them does not change them.
  std::vector<size_t> files;
  for (size_t i = 0; i < tree->size(); ++i) {
    const TreeItem& t = (*tree)[i];
    if (!t.entry.is_dir()) {
      files.push_back(i);
    } else if (!t.path.empty() && mkdir(Join(out_dir, t.path).c_str(), 0700) != 0) {
      std::fprintf(stderr, "pcr extract: %s: %s\n", Join(out_dir, t.path).c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  Mutex mu;
  uint64_t failed = 0;  // files
  uint64_t folders_failed = 0;
  std::atomic<uint64_t> bytes{0};
  ParallelFor(files.size(), jobs, [&](size_t n) {
    const TreeItem& t = (*tree)[files[n]];
    Status s = ExtractFile(**store, t.entry, scans, Join(out_dir, t.path));
    if (s.ok()) {
      bytes += t.entry.SizeAtLevel(scans);
      return;
    }
    MutexLock lock(&mu);
    ++failed;
    std::fprintf(stderr, "pcr extract: %s: %s\n", t.path.c_str(), s.message().c_str());
  });
  for (size_t i = tree->size(); i-- > 0;) {
    const TreeItem& t = (*tree)[i];
    if (!t.entry.is_dir()) continue;
    const std::string dest = Join(out_dir, t.path);
    const timespec times[2] = {
        {0, UTIME_OMIT},
        {static_cast<time_t>(t.entry.mtime_sec), static_cast<long>(t.entry.mtime_nsec)}};
    if (chmod(dest.c_str(), t.entry.mode & 0777) != 0 ||
        utimensat(AT_FDCWD, dest.c_str(), times, 0) != 0) {
      std::fprintf(stderr, "pcr extract: %s: %s\n", dest.c_str(), std::strerror(errno));
      ++folders_failed;
    }
  }
  std::printf("pcr extract: %zu files (%" PRIu64 " bytes) and %zu folders at level %d into %s\n",
              files.size() - failed, bytes.load(), tree->size() - files.size(), scans,
              out_dir.c_str());
  if (failed) {
    std::fprintf(stderr, "pcr extract: %" PRIu64 " of %zu files failed (named above)\n", failed,
                 files.size());
  }
  if (failed || folders_failed) return 1;
  return 0;
}

}  // namespace pcrfs::tools
