// A walk of the source folder: every directory and regular file, children in byte-wise name
// order, symlinks followed. Each folder is read through a descriptor opened relative to its
// parent's, so paths longer than PATH_MAX are walked too. What cannot be stored (dangling symlinks,
// loops, sockets, unreadable folders) is collected as problems, never dropped silently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"

namespace pcrfs::tools {

// Append-only bytes in blocks of at most 1 MiB, never moved once written: no copy of
// everything when it grows (a std::string's doubling holds the old and the new buffer at once),
// and no allocation per item. An item (at most kMaxItem bytes) never straddles two blocks, so
// it is read back from its position alone.
class ByteArena {
 public:
  static constexpr size_t kMaxItem = 4096;

  // Appends `bytes` (at most kMaxItem of them) and returns their position.
  uint64_t Append(std::string_view bytes) {
    if (blocks_.empty() ||
        std::min(blocks_.back().capacity(), kBlockSize) - blocks_.back().size() < bytes.size()) {
      blocks_.emplace_back();
      // Blocks grow with the arena: small trees stay small, large ones take 1 MiB at a time.
      blocks_.back().reserve(std::clamp<size_t>(size_ / 4, kMaxItem, kBlockSize));
    }
    std::string& b = blocks_.back();
    const uint64_t at = (uint64_t{blocks_.size() - 1} << kBlockBits) | b.size();
    b.append(bytes);
    size_ += bytes.size();
    return at;
  }
  // The bytes from position `at` to the end of its block.
  std::string_view From(uint64_t at) const {
    const std::string& b = blocks_[static_cast<size_t>(at >> kBlockBits)];
    return std::string_view(b).substr(static_cast<size_t>(at & (kBlockSize - 1)));
  }
  std::string_view At(uint64_t at, size_t length) const { return From(at).substr(0, length); }
  void Clear() {
    blocks_ = {};
    size_ = 0;
  }

 private:
  static constexpr int kBlockBits = 20;
  static constexpr size_t kBlockSize = size_t{1} << kBlockBits;
  std::vector<std::string> blocks_;
  uint64_t size_ = 0;
};

// One file or folder of a listing: 40 bytes, its name in the tree's arena (SourceTree::Name), a
// folder's children in the tree's lists (SourceTree::Children), so that a listing of millions
// of files stays ~70 bytes per file.
struct SourceNode {
  static constexpr uint32_t kNoChildren = UINT32_MAX;
  uint64_t name_at = 0;  // in SourceTree's name arena
  uint32_t parent = 0;   // index of the parent node; the root is its own parent
  uint16_t mode = 0;     // permission bits (07777)
  uint8_t name_length = 0;
  bool is_dir = false;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint32_t children = kNoChildren;  // directories with children: SourceTree::child_lists index
  uint64_t size = 0;                // files
};

struct SourceProblem {
  std::string rel_path;
  std::string reason;
};

struct SourceTree {
  std::string root;  // the absolute path that was walked
  // nodes[0] is the root. A deque: a listing of millions grows without copying them all.
  std::deque<SourceNode> nodes;
  // Regular files in depth-first order over sorted names: the order records are written in.
  std::vector<uint32_t> files;
  std::vector<SourceProblem> problems;
  // The children of the folders that have some (SourceNode::children), sorted by name.
  std::vector<std::vector<uint32_t>> child_lists;
  ByteArena names;

  std::string_view Name(const SourceNode& n) const {
    return n.name_length == 0 ? std::string_view() : names.At(n.name_at, n.name_length);
  }
  // REQUIRES: name is at most 255 bytes (index::IsValidName), or empty for the root.
  void SetName(SourceNode* n, std::string_view name) {
    n->name_length = static_cast<uint8_t>(std::min<size_t>(name.size(), 255));
    n->name_at = n->name_length == 0 ? 0 : names.Append(name.substr(0, n->name_length));
  }
  const std::vector<uint32_t>& Children(const SourceNode& n) const {
    static const std::vector<uint32_t> kNone;
    return n.children == SourceNode::kNoChildren ? kNone : child_lists[n.children];
  }
  // Node `dir`'s list of children, made if it has none yet.
  std::vector<uint32_t>& MutableChildren(uint32_t dir) {
    SourceNode& n = nodes[dir];
    if (n.children == SourceNode::kNoChildren) {
      n.children = static_cast<uint32_t>(child_lists.size());
      child_lists.emplace_back();
    }
    return child_lists[n.children];
  }

  // '/'-separated, relative to the root; empty for the root. Computed from the parent chain,
  // not stored: a million stored paths would cost ~100 MB.
  std::string RelPath(const SourceNode& n) const {
    if (n.parent == 0 && n.name_length == 0) return {};
    std::string parent = RelPath(nodes[n.parent]);
    return parent.empty() ? std::string(Name(n)) : parent + "/" + std::string(Name(n));
  }
  std::string AbsPath(const SourceNode& n) const {
    const std::string rel = RelPath(n);
    return rel.empty() ? root : root + "/" + rel;
  }

  // Appends a node named `name` under folder node `parent` (mode 0755 for a folder, 0644 for a
  // file; no stat) and returns its index. Children are not sorted here: listings that do not
  // come in name order (archives, buckets) sort them when they are complete (SortChildren).
  uint32_t AddChild(uint32_t parent, std::string_view name, bool is_dir) {
    const auto id = static_cast<uint32_t>(nodes.size());
    SourceNode n;
    SetName(&n, name);
    n.parent = parent;
    n.is_dir = is_dir;
    n.mode = is_dir ? 0755 : 0644;
    nodes.push_back(n);
    MutableChildren(parent).push_back(id);
    return id;
  }
  // Frees the nodes, their names and the child lists (files and problems stay, for their
  // counts; no node may be used after).
  void ReleaseNodes() {
    nodes = {};
    child_lists = {};
    names.Clear();
  }
  // Sorts every folder's children by name.
  void SortChildren() {
    for (std::vector<uint32_t>& kids : child_lists) {
      std::sort(kids.begin(), kids.end(),
                [&](uint32_t x, uint32_t y) { return Name(nodes[x]) < Name(nodes[y]); });
    }
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
