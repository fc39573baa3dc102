// A walk of the source folder: every directory and regular file, children in byte-wise name
// order, symlinks followed. Each folder is read through a descriptor opened relative to its
// parent's, so paths longer than PATH_MAX are walked too. What cannot be stored (dangling symlinks,
// loops, sockets, unreadable folders) is collected as problems, never dropped silently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"

namespace pcrfs::tools {

struct SourceNode {
  std::string name;     // empty for the root
  uint32_t parent = 0;  // index of the parent node; the root is its own parent
  bool is_dir = false;
  uint32_t mode = 0;  // permission bits (07777)
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint64_t size = 0;               // files
  std::vector<uint32_t> children;  // directories: node indices, sorted by name
};

struct SourceProblem {
  std::string rel_path;
  std::string reason;
};

struct SourceTree {
  std::string root;               // the absolute path that was walked
  std::vector<SourceNode> nodes;  // nodes[0] is the root
  // Regular files in depth-first order over sorted names: the order records are written in.
  std::vector<uint32_t> files;
  std::vector<SourceProblem> problems;

  // '/'-separated, relative to the root; empty for the root. Computed from the parent chain,
  // not stored: a million stored paths would cost ~100 MB.
  std::string RelPath(const SourceNode& n) const {
    if (n.parent == 0 && n.name.empty()) return {};
    std::string parent = RelPath(nodes[n.parent]);
    return parent.empty() ? n.name : parent + "/" + n.name;
  }
  std::string AbsPath(const SourceNode& n) const {
    const std::string rel = RelPath(n);
    return rel.empty() ? root : root + "/" + rel;
  }

  // Appends a node named `name` under folder node `parent` (mode 0755 for a folder, 0644 for a
  // file; no stat) and returns its index. Children are not sorted here: listings that do not
  // come in name order (archives, buckets) sort them when they are complete.
  uint32_t AddChild(uint32_t parent, const std::string& name, bool is_dir) {
    const auto id = static_cast<uint32_t>(nodes.size());
    SourceNode n;
    n.name = name;
    n.parent = parent;
    n.is_dir = is_dir;
    n.mode = is_dir ? 0755 : 0644;
    nodes.push_back(std::move(n));
    nodes[parent].children.push_back(id);
    return id;
  }

  // Opens file node `node` for reading, O_RDONLY. A path longer than PATH_MAX cannot be
  // open(2)ed whole, so it is opened in steps of at most PATH_MAX bytes, each relative to the
  // folder the last one reached; usually that is one step.
  Result<UniqueFd> OpenFile(uint32_t node) const;
};

// Called as a listing goes with the files and their bytes found so far (cheap: it may be
// called once per file).
using ListingProgress = std::function<void(uint64_t files, uint64_t bytes)>;

// Fails (before any work) only if root itself is missing, not a directory or unreadable.
Result<SourceTree> WalkSource(const std::string& root, const ListingProgress& progress = {});

}  // namespace pcrfs::tools
