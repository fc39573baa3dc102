#include "builder/remote_source.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unordered_map>
#include <vector>

#include "index/entry.h"
#include "remote/url.h"

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

// The text of the first <tag>...</tag> in [from, to) of xml, or nullopt.
std::optional<std::string_view> Element(std::string_view xml, std::string_view tag, size_t from = 0,
                                        size_t to = std::string_view::npos) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const size_t b = xml.find(open, from);
  if (b == std::string_view::npos || (to != std::string_view::npos && b >= to)) {
    return std::nullopt;
  }
  const size_t e = xml.find(close, b + open.size());
  if (e == std::string_view::npos || (to != std::string_view::npos && e > to)) return std::nullopt;
  return xml.substr(b + open.size(), e - b - open.size());
}

// XML character data with its five entities and numeric references decoded.
std::optional<std::string> XmlText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) return std::nullopt;
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out += '&';
    } else if (ent == "lt") {
      out += '<';
    } else if (ent == "gt") {
      out += '>';
    } else if (ent == "quot") {
      out += '"';
    } else if (ent == "apos") {
      out += '\'';
    } else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string digits(ent.substr(hex ? 2 : 1));
      if (digits.empty()) return std::nullopt;
      char* end = nullptr;
      const unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (*end != '\0' || cp == 0 || cp > 0x10FFFF) return std::nullopt;
      // UTF-8.
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      return std::nullopt;
    }
    i = semi;
  }
  return out;
}

// "2026-11-23T14:46:21.123Z" -> seconds and nanoseconds since the epoch.
bool ParseIsoTime(std::string_view s, int64_t* sec, uint32_t* nsec) {
  std::tm tm{};
  int ms = 0;
  const std::string text(s);
  const char* end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return false;
  if (*end == '.') {
    ++end;
    int digits = 0;
    while (std::isdigit(static_cast<unsigned char>(*end))) {
      if (digits < 3) ms = ms * 10 + (*end - '0');
      ++digits;
      ++end;
    }
    for (; digits < 3; ++digits) ms *= 10;
  }
  if (*end != 'Z' || end[1] != '\0') return false;
  *sec = static_cast<int64_t>(::timegm(&tm));
  *nsec = static_cast<uint32_t>(ms) * 1000000u;
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
    tree_->nodes.push_back(std::move(root));
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
    for (SourceNode& n : tree_->nodes) {
      std::sort(n.children.begin(), n.children.end(), [&](uint32_t a, uint32_t b) {
        return tree_->nodes[a].name < tree_->nodes[b].name;
      });
    }
    // Files in depth-first order over sorted names, as WalkSource lists a folder.
    std::vector<uint32_t> stack{0};
    while (!stack.empty()) {
      const uint32_t d = stack.back();
      stack.pop_back();
      const auto& kids = tree_->nodes[d].children;
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
    const auto id = static_cast<uint32_t>(tree_->nodes.size());
    SourceNode n;
    n.name = name;
    n.parent = dir;
    n.is_dir = is_dir;
    n.mode = is_dir ? 0755 : 0644;
    tree_->nodes.push_back(std::move(n));
    tree_->nodes[dir].children.push_back(id);
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
      : access_(std::move(access)), url_(access_->ObjectUrl("")), chunk_(chunk) {}

  Result<std::span<const uint8_t>> Read() override {
    if (known_size_ && pos_ >= size_) return std::span<const uint8_t>();
    // The first request is small: a probe of the format (ProbeArchive) reads only that much.
    uint64_t n = known_size_ ? chunk_ : std::min(chunk_, kFirstChunk);
    if (known_size_) n = std::min(n, size_ - pos_);
    buf_.resize(n);
    HttpRequest req;
    req.url = url_;
    req.range = ByteRange{pos_, n};
    req.dst = buf_.data();
    req.dst_size = n;
    auto r = access_->client->FetchBlocking(std::move(req));
    if (!r) {
      // A range at the very end of an object whose size was not known yet: 416.
      return Err(r.error());
    }
    const uint64_t total = r->content_range ? r->content_range->total : r->body_bytes;
    if (!known_size_) {
      size_ = total;
      known_size_ = true;
    } else if (total != size_) {
      return Err(
          Status::Corruption(access_->name + ": the archive changed while it was read (size " +
                             std::to_string(total) + ", was " + std::to_string(size_) + ")"));
    }
    const uint64_t want = std::min(n, size_ - std::min(size_, pos_));
    if (r->body_bytes != want) {
      return Err(Status::Corruption(access_->name + ": got " + std::to_string(r->body_bytes) +
                                    " of " + std::to_string(want) + " bytes at " +
                                    std::to_string(pos_) + " (truncated body)"));
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
  std::string url_;
  uint64_t chunk_;
  std::vector<uint8_t> buf_;
  uint64_t pos_ = 0;
  uint64_t size_ = 0;
  bool known_size_ = false;
};

}  // namespace

bool IsRemoteArchiveUrl(const std::string& url) {
  auto u = ParseUrl(url);
  if (!u) return false;
  if (!u->is_s3()) return true;
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".zip"}) {
    if (EndsWithNoCase(u->path, ext)) return true;
  }
  return false;
}

Result<RemoteAccess> RemoteAccess::Create(const std::string& url, const RemoteOptions& options) {
  RemoteAccess a;
  auto parsed = ParseUrl(url);
  if (!parsed) return Err(parsed.error());
  a.url = *parsed;
  a.name = parsed->ToString();
  StoreLocation loc;
  loc.remote = true;
  loc.url = a.url;
  loc.name = a.name;
  loc.options = options;
  if (a.url.is_s3()) {
    auto s3 = ResolveS3Config(a.url, options.s3);
    if (!s3) return Err(s3.error());
    a.s3 = *s3;
    loc.s3 = *s3;
  }
  auto client_options = ClientOptionsFor(loc);
  if (!client_options) return Err(client_options.error());
  auto client = HttpClient::Create(std::move(*client_options));
  if (!client) return Err(client.error());
  a.client = std::move(*client);
  return a;
}

std::string RemoteAccess::ObjectUrl(const std::string& key) const {
  if (!s3) return url.ToString();
  if (key.empty()) {  // the URL's own object: an archive at s3://BUCKET/KEY
    S3Config c = *s3;
    c.prefix.clear();
    return c.ObjectUrl(s3->prefix);
  }
  return s3->ObjectUrl(key);
}

Status ReadObjectRange(HttpClient& client, const std::string& url, const std::string& name,
                       uint64_t size, uint64_t offset, std::span<uint8_t> dst) {
  if (dst.empty()) return Status::OK();
  HttpRequest req;
  req.url = url;
  req.range = ByteRange{offset, dst.size()};
  req.dst = dst.data();
  req.dst_size = dst.size();
  auto r = client.FetchBlocking(std::move(req));
  if (!r) return r.error();
  const uint64_t total = r->content_range ? r->content_range->total : r->body_bytes;
  if (total != size) {
    return Status::Corruption(name + ": changed since it was listed (size " +
                              std::to_string(total) + ", listed " + std::to_string(size) + ")");
  }
  if (r->body_bytes != dst.size()) {
    return Status::Corruption(name + ": got " + std::to_string(r->body_bytes) + " of " +
                              std::to_string(dst.size()) + " bytes at " + std::to_string(offset) +
                              " (truncated body)");
  }
  return Status::OK();
}

Result<std::unique_ptr<BucketSource>> BucketSource::Open(RemoteAccess access,
                                                         const ListingProgress& progress) {
  if (!access.s3) return Err(Status::InvalidArgument(access.name + ": not an s3:// URL"));
  std::unique_ptr<BucketSource> src(new BucketSource(std::move(access)));
  const S3Config& s3 = *src->access_.s3;
  SourceTree& tree = src->tree_;
  tree.root = src->access_.name;
  TreeBuilder builder(&tree);
  const std::string prefix = s3.prefix.empty() ? "" : s3.prefix + "/";
  const std::string page = "&max-keys=" + std::to_string(ListPage());
  std::string token;
  uint64_t files = 0, bytes = 0;
  for (;;) {
    HttpRequest req;
    req.url = s3.ListUrl(token) + page;  // the signer sorts the query itself
    auto r = src->access_.client->FetchBlocking(std::move(req));
    if (!r) return Err(r.error());
    const std::string_view xml = r->body;
    if (xml.find("<ListBucketResult") == std::string_view::npos) {
      return Err(Status::Corruption(src->access_.name + ": not a ListObjectsV2 answer"));
    }
    for (size_t p = xml.find("<Contents>"); p != std::string_view::npos;
         p = xml.find("<Contents>", p + 10)) {
      const size_t end = xml.find("</Contents>", p);
      if (end == std::string_view::npos) {
        return Err(Status::Corruption(src->access_.name + ": a listing entry is cut"));
      }
      auto key_xml = Element(xml, "Key", p, end);
      auto size_text = Element(xml, "Size", p, end);
      auto time_text = Element(xml, "LastModified", p, end);
      std::optional<std::string> key = key_xml ? XmlText(*key_xml) : std::nullopt;
      int64_t sec = 0;
      uint32_t nsec = 0;
      char* size_end = nullptr;
      const std::string size_str(size_text.value_or(""));
      const uint64_t size = std::strtoull(size_str.c_str(), &size_end, 10);
      if (!key || size_str.empty() || *size_end != '\0' || !time_text ||
          !ParseIsoTime(*time_text, &sec, &nsec)) {
        return Err(Status::Corruption(src->access_.name + ": a listing entry without a valid "
                                                          "Key, Size or LastModified"));
      }
      if (key->compare(0, prefix.size(), prefix) != 0) {
        return Err(Status::Corruption(src->access_.name + ": listed a key outside the prefix"));
      }
      const std::string rel = key->substr(prefix.size());
      if (rel.empty()) continue;  // the prefix's own folder marker
      builder.AddObject(rel, size, sec, nsec);
      if (rel.back() != '/') {
        ++files;
        bytes += size;
      }
      if (progress) progress(files, bytes);
    }
    const auto truncated = Element(xml, "IsTruncated");
    if (!truncated || *truncated != "true") break;
    const auto next = Element(xml, "NextContinuationToken");
    auto next_text = next ? XmlText(*next) : std::nullopt;
    if (!next_text || next_text->empty() || *next_text == token) {
      return Err(Status::Corruption(src->access_.name +
                                    ": a truncated listing without a new continuation token"));
    }
    token = std::move(*next_text);
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
  return ReadObjectRange(*access_.client, access_.ObjectUrl(tree.RelPath(tree.nodes[node])),
                         NameOf(tree, node), tree.nodes[node].size, offset, dst);
}

ArchiveStreamOpener RemoteArchiveOpener(std::shared_ptr<const RemoteAccess> access,
                                        uint64_t chunk) {
  return [access = std::move(access), chunk]() -> Result<std::unique_ptr<ArchiveStream>> {
    return std::unique_ptr<ArchiveStream>(new RemoteArchiveStream(access, chunk));
  };
}

}  // namespace pcrfs::tools
