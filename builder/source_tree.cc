#include "builder/source_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "common/file_util.h"
#include "index/entry.h"

namespace pcrfs::tools {
namespace {

struct DirId {
  dev_t dev;
  ino_t ino;
  bool operator==(const DirId&) const = default;
};

class Walker {
 public:
  Walker(SourceTree* tree, const ListingProgress& progress) : tree_(tree), progress_(progress) {}

  // Reads the directory at node `dir_index` (already stat'ed) and recurses.
  void WalkDir(uint32_t dir_index, int dirfd, std::vector<DirId>* ancestors) {
    DIR* d = ::fdopendir(dirfd);
    if (d == nullptr) {
      Problem(dir_index, std::string("cannot read directory: ") + std::strerror(errno));
      ::close(dirfd);
      return;
    }
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      struct dirent* de = ::readdir(d);
      if (de == nullptr) {
        if (errno != 0) {
          Problem(dir_index, std::string("error reading directory: ") + std::strerror(errno));
        }
        break;
      }
      std::string name = de->d_name;
      if (name == "." || name == "..") continue;
      names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());

    for (const std::string& name : names) {
      const std::string rel = Join(tree_->RelPath(tree_->nodes[dir_index]), name);
      if (!index::IsValidName(name)) {
        tree_->problems.push_back({rel, "not a valid file name"});
        continue;
      }
      struct stat st;
      if (::fstatat(::dirfd(d), name.c_str(), &st, 0) != 0) {
        const int err = errno;
        struct stat lst;
        if (err == ELOOP) {
          tree_->problems.push_back({rel, "symlink loop"});
        } else if (err == ENOENT &&
                   ::fstatat(::dirfd(d), name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISLNK(lst.st_mode)) {
          tree_->problems.push_back({rel, "dangling symlink"});
        } else {
          tree_->problems.push_back({rel, std::string("cannot stat: ") + std::strerror(err)});
        }
        continue;
      }
      if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
        tree_->problems.push_back({rel, "not a regular file or directory"});
        continue;
      }
      const auto child = static_cast<uint32_t>(tree_->nodes.size());
      SourceNode node;
      tree_->SetName(&node, name);
      node.parent = dir_index;
      Fill(&node, st);
      tree_->nodes.push_back(node);
      tree_->MutableChildren(dir_index).push_back(child);

      if (S_ISREG(st.st_mode)) {
        tree_->files.push_back(child);
        bytes_ += static_cast<uint64_t>(st.st_size);
        if (progress_) progress_(tree_->files.size(), bytes_);
        continue;
      }
      const DirId id{st.st_dev, st.st_ino};
      if (std::find(ancestors->begin(), ancestors->end(), id) != ancestors->end()) {
        // A symlink back to an ancestor: following it would never end.
        tree_->problems.push_back({rel, "symlink loop (links to its own ancestor)"});
        tree_->MutableChildren(dir_index).pop_back();
        tree_->nodes.pop_back();
        continue;
      }
      int fd = ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) {
        Problem(child, std::string("cannot open directory: ") + std::strerror(errno));
        continue;
      }
      ancestors->push_back(id);
      WalkDir(child, fd, ancestors);
      ancestors->pop_back();
    }
    ::closedir(d);
  }

  static void Fill(SourceNode* node, const struct stat& st) {
    node->is_dir = S_ISDIR(st.st_mode);
    node->mode = static_cast<uint16_t>(st.st_mode & 07777);
    node->mtime_sec = st.st_mtim.tv_sec;
    node->mtime_nsec = static_cast<uint32_t>(st.st_mtim.tv_nsec);
    node->size = node->is_dir ? 0 : static_cast<uint64_t>(st.st_size);
  }

 private:
  static std::string Join(const std::string& dir, const std::string& name) {
    return dir.empty() ? name : dir + "/" + name;
  }
  void Problem(uint32_t node, std::string reason) {
    const std::string rel = tree_->RelPath(tree_->nodes[node]);
    tree_->problems.push_back({rel.empty() ? "." : rel, std::move(reason)});
  }

  SourceTree* tree_;
  const ListingProgress& progress_;
  uint64_t bytes_ = 0;
};

}  // namespace

Result<UniqueFd> SourceTree::OpenFile(uint32_t node) const {
  std::vector<std::string_view> names;  // from the root down
  for (uint32_t i = node; i != 0; i = nodes[i].parent) names.push_back(Name(nodes[i]));
  std::reverse(names.begin(), names.end());
  UniqueFd dir;  // none yet: the first step starts at the root's own path
  std::string step = root;
  for (std::string_view name : names) {
    if (step.size() + 1 + name.size() >= PATH_MAX) {
      const int fd = ::openat(dir.valid() ? dir.get() : AT_FDCWD, step.c_str(),
                              O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) return Err(Status::FromErrno(AbsPath(nodes[node]), errno));
      dir = UniqueFd(fd);
      step.clear();
    }
    if (!step.empty() && step.back() != '/') step += '/';
    step += name;
  }
  const int fd = ::openat(dir.valid() ? dir.get() : AT_FDCWD, step.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(Status::FromErrno(AbsPath(nodes[node]), errno));
  return UniqueFd(fd);
}

Result<SourceTree> WalkSource(const std::string& root, const ListingProgress& progress) {
  SourceTree tree;
  tree.root = root;
  while (tree.root.size() > 1 && tree.root.back() == '/') tree.root.pop_back();
  struct stat st;
  if (::stat(tree.root.c_str(), &st) != 0) return Err(Status::FromErrno(root, errno));
  if (!S_ISDIR(st.st_mode)) return Err(Status::InvalidArgument(root + ": not a directory"));
  int fd = ::open(tree.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Err(Status::FromErrno(root, errno));
  SourceNode node;
  Walker::Fill(&node, st);
  tree.nodes.push_back(node);
  std::vector<DirId> ancestors{{st.st_dev, st.st_ino}};
  Walker walker(&tree, progress);
  walker.WalkDir(0, fd, &ancestors);
  return tree;
}

}  // namespace pcrfs::tools
