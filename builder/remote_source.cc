#include "builder/remote_source.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "index/entry.h"
#include "remote/azure.h"
#include "remote/url.h"
#include "remote/xml.h"

namespace pcrfs::tools {
namespace {

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) {
      return false;
    }
  }
  return true;
}

uint32_t ListPage() {
  const char* v = std::getenv("PCRFS_S3_LIST_PAGE");
  if (v == nullptr) return BucketSource::kListPage;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  return *v >= '1' && *v <= '9' && *end == '\0' && n <= BucketSource::kListPage
             ? static_cast<uint32_t>(n)
             : BucketSource::kListPage;
}

// Builds the SourceTree of a listing as a folder walk would: folders made as keys need them,
// children sorted by name, files in depth-first order.
class TreeBuilder {
 public:
  explicit TreeBuilder(SourceTree* tree) : tree_(tree) {
    SourceNode root;
    root.is_dir = true;
    root.mode = 0755;
    tree_->nodes.push_back(root);
  }

  // An object, or with a trailing '/' a folder marker (the folder, perhaps empty, whose mtime
  // is at least the marker's).
  void AddObject(const std::string& rel, uint64_t size, int64_t sec, uint32_t nsec) {
    const bool marker = rel.back() == '/';
    const std::string path = marker ? rel.substr(0, rel.size() - 1) : rel;
    std::vector<std::string> parts;
    size_t at = 0;
    while (at <= path.size()) {
      size_t slash = path.find('/', at);
      if (slash == std::string::npos) slash = path.size();
      parts.push_back(path.substr(at, slash - at));
      at = slash + 1;
    }
    for (const std::string& p : parts) {
      if (p.empty() || p == "." || p == ".." || !index::IsValidName(p)) {
        tree_->problems.push_back({rel,
                                   "not a path in a tree: an empty, '.' or '..' component, "
                                   "or a name longer than 255 bytes (not stored)"});
        return;
      }
    }
    uint32_t dir = 0;
    for (size_t i = 0; i + (marker ? 0 : 1) < parts.size(); ++i) {
      auto it = children_.find(Key(dir, parts[i]));
      if (it == children_.end()) {
        dir = Add(dir, parts[i], true);
      } else if (!tree_->nodes[it->second].is_dir) {
        tree_->problems.push_back({rel, "a folder on its path is also an object (not stored)"});
        return;
      } else {
        dir = it->second;
      }
    }
    if (marker) {
      SourceNode& d = tree_->nodes[dir];
      if (sec > d.mtime_sec || (sec == d.mtime_sec && nsec > d.mtime_nsec)) {
        d.mtime_sec = sec;
        d.mtime_nsec = nsec;
      }
      return;
    }
    if (children_.count(Key(dir, parts.back()))) {
      tree_->problems.push_back({rel, "also a folder of other objects (not stored)"});
      return;
    }
    const uint32_t node = Add(dir, parts.back(), false);
    SourceNode& n = tree_->nodes[node];
    n.mode = 0644;
    n.size = size;
    n.mtime_sec = sec;
    n.mtime_nsec = nsec;
  }

  void Finish() {
    // Folders get the newest mtime below them (as an archive's implied folders): a function of
    // the objects alone.
    for (size_t i = tree_->nodes.size(); i-- > 1;) {
      const SourceNode& n = tree_->nodes[i];
      SourceNode& p = tree_->nodes[n.parent];
      if (n.mtime_sec > p.mtime_sec ||
          (n.mtime_sec == p.mtime_sec && n.mtime_nsec > p.mtime_nsec)) {
        p.mtime_sec = n.mtime_sec;
        p.mtime_nsec = n.mtime_nsec;
      }
    }
    tree_->SortChildren();
    // Files in depth-first order over sorted names, as WalkSource lists a folder.
    std::vector<uint32_t> stack{0};
    while (!stack.empty()) {
      const uint32_t d = stack.back();
      stack.pop_back();
      const auto& kids = tree_->Children(tree_->nodes[d]);
      // Children are visited in order: files and folders interleaved by name, so push in
      // reverse and handle files when popped.
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
      if (!tree_->nodes[d].is_dir) tree_->files.push_back(d);
    }
    children_.clear();
  }

 private:
  static std::string Key(uint32_t dir, const std::string& name) {
    return std::to_string(dir) + "/" + name;
  }
  uint32_t Add(uint32_t dir, const std::string& name, bool is_dir) {
    const uint32_t id = tree_->AddChild(dir, name, is_dir);
    children_.emplace(Key(dir, name), id);
    return id;
  }

  SourceTree* tree_;
  std::unordered_map<std::string, uint32_t> children_;
};

// Sequential ranged GETs of an archive, one chunk in memory.
class RemoteArchiveStream final : public ArchiveStream {
 public:
  static constexpr uint64_t kFirstChunk = uint64_t{256} << 10;

  RemoteArchiveStream(std::shared_ptr<const RemoteAccess> access, uint64_t chunk)
      : access_(std::move(access)), chunk_(chunk) {}

  Result<std::span<const uint8_t>> Read() override {
    if (known_size_ && pos_ >= size_) return std::span<const uint8_t>();
    // The first request is small: a probe of the format (ProbeArchive) reads only that much.
    uint64_t n = known_size_ ? chunk_ : std::min(chunk_, kFirstChunk);
    if (known_size_) n = std::min(n, size_ - pos_);
    buf_.resize(n);
    ObjectGet req;
    req.key = "";  // the URL's own object
    req.range = ByteRange{pos_, n};
    req.dst = buf_.data();
    req.dst_size = n;
    if (known_size_) {
      req.expected_size = size_;
      req.size_label = "was";
      req.changed_advice = " while it was read";
    }
    // A range at the very end of an object whose size was not known yet: 416.
    auto r = access_->client->GetBlocking(std::move(req));
    if (!r) return Err(r.error());
    if (!known_size_) {
      size_ = r->size;
      known_size_ = true;
    }
    pos_ += r->body_bytes;
    return std::span<const uint8_t>(buf_.data(), r->body_bytes);
  }

  Result<uint64_t> Skip(uint64_t n) override {
    // libarchive skips only what it has not been handed yet: move the position; the next Read
    // fetches from there.
    if (!known_size_) return uint64_t{0};
    const uint64_t skip = std::min(n, size_ - std::min(size_, pos_));
    pos_ += skip;
    return skip;
  }

 private:
  std::shared_ptr<const RemoteAccess> access_;
  uint64_t chunk_;
  std::vector<uint8_t> buf_;
  uint64_t pos_ = 0;
  uint64_t size_ = 0;
  bool known_size_ = false;
};

}  // namespace

bool IsRemoteArchiveUrl(const std::string& url) {
  std::string path;
  if (IsAzureUrl(url)) {
    path = RedactUrl(url);  // no query
  } else {
    auto u = ParseUrl(url);
    if (!u) return false;
    if (!u->is_s3()) return true;
    path = u->path;
  }
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".zip"}) {
    if (EndsWithNoCase(path, ext)) return true;
  }
  return false;
}

Result<RemoteAccess> RemoteAccess::Create(const std::string& url, const RemoteOptions& options) {
  // The same resolution as a store's: a build source is read as a store is.
  auto loc = ResolveLocation(url, options);
  if (!loc) return Err(loc.error());
  RemoteAccess a;
  a.url = loc->url;
  a.name = loc->name;
  a.is_bucket = loc->s3.has_value() || loc->azure.has_value();
  PCRFS_RETURN_ERR_IF_ERROR(StartCredentialRenewal(*loc));  // a long build outlives a token
  auto client = MakeObjectClient(*loc);
  if (!client) return Err(client.error());
  a.client = std::move(*client);
  return a;
}

Status ReadObjectRange(ObjectClient& client, const std::string& key, uint64_t size, uint64_t offset,
                       std::span<uint8_t> dst) {
  if (dst.empty()) return Status::OK();
  ObjectGet req;
  req.key = key;
  req.range = ByteRange{offset, dst.size()};
  req.expected_size = size;
  req.size_label = "listed";
  req.changed_advice = " since it was listed";
  req.dst = dst.data();
  req.dst_size = dst.size();
  auto r = client.GetBlocking(std::move(req));
  return r ? Status::OK() : r.error();
}

Result<std::unique_ptr<BucketSource>> BucketSource::Open(RemoteAccess access,
                                                         const ListingProgress& progress) {
  if (!access.is_bucket) {
    return Err(Status::InvalidArgument(access.name + ": not a bucket URL (s3://, gs://)"));
  }
  std::unique_ptr<BucketSource> src(new BucketSource(std::move(access)));
  SourceTree& tree = src->tree_;
  tree.root = src->access_.name;
  TreeBuilder builder(&tree);
  std::string token;
  std::unordered_set<std::string> tokens_seen{token};
  uint64_t files = 0, bytes = 0;
  for (;;) {
    auto page = src->access_.client->List(token, ListPage());
    if (!page) return Err(page.error());
    for (const ObjectListing::Entry& e : page->entries) {
      builder.AddObject(e.key, e.size, e.mtime_sec, e.mtime_nsec);
      if (e.key.back() != '/') {
        ++files;
        bytes += e.size;
      }
      if (progress) progress(files, bytes);
    }
    if (page->next_token.empty()) break;
    // A token seen before (A, B, A, ...) would list the same pages forever.
    if (!tokens_seen.insert(page->next_token).second) {
      return Err(Status::Corruption(
          src->access_.name + ": the listing gave a continuation token it gave before (a loop)"));
    }
    token = std::move(page->next_token);
  }
  builder.Finish();
  if (tree.files.empty() && tree.problems.empty()) {
    return Err(Status::InvalidArgument(src->access_.name + ": no objects under this prefix"));
  }
  return src;
}

std::string BucketSource::NameOf(const SourceTree& tree, uint32_t node) const {
  return access_.name + "/" + tree.RelPath(tree.nodes[node]);
}

Status BucketSource::Read(const SourceTree& tree, uint32_t node, uint64_t offset,
                          std::span<uint8_t> dst) const {
  // The key below the prefix is the node's path: ObjectUrl adds the prefix.
  return ReadObjectRange(*access_.client, tree.RelPath(tree.nodes[node]), tree.nodes[node].size,
                         offset, dst);
}

ArchiveStreamOpener RemoteArchiveOpener(std::shared_ptr<const RemoteAccess> access,
                                        uint64_t chunk) {
  return [access = std::move(access), chunk]() -> Result<std::unique_ptr<ArchiveStream>> {
    return std::unique_ptr<ArchiveStream>(new RemoteArchiveStream(access, chunk));
  };
}

}  // namespace pcrfs::tools
