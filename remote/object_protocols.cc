#include "remote/object_protocols.h"

#include <cctype>
#include <cstdlib>
#include <optional>

#include "remote/url.h"
#include "remote/xml.h"

namespace pcrfs {
namespace {

// A listing's LastModified (ParseIsoTimeUtc) as the entry's mtime.
bool ParseMtime(std::string_view text, ObjectListing::Entry* e) {
  const std::optional<IsoTime> t = ParseIsoTimeUtc(text);
  if (!t) return false;
  e->mtime_sec = t->sec;
  e->mtime_nsec = t->nsec;
  return true;
}

}  // namespace

std::string HttpProtocol::ObjectUrl(std::string_view key) const {
  std::string url = key.empty() ? root_.ToString() : root_.Join(key).ToString();
  if (!root_.query.empty()) url += "?" + root_.query;
  return url;
}

std::string HttpProtocol::Name(std::string_view key) const {
  return key.empty() ? root_.ToString() : root_.Join(key).ToString();
}

Result<std::string> HttpProtocol::ListUrl(std::string_view, uint32_t) const {
  return Err(Status::NotSupported(root_.ToString() + ": a web server cannot list its folders"));
}

Result<ObjectListing> HttpProtocol::ParseListing(std::string_view) const {
  return Err(Status::NotSupported(root_.ToString() + ": a web server cannot list its folders"));
}

std::string S3Protocol::ObjectUrl(std::string_view key) const {
  if (key.empty()) {  // the URL's own object: an archive at s3://BUCKET/KEY
    S3Config c = config_;
    c.prefix.clear();
    return c.ObjectUrl(config_.prefix);
  }
  return config_.ObjectUrl(key);
}

std::string S3Protocol::Name(std::string_view key) const {
  Url u;
  u.scheme = config_.gcs ? Url::Scheme::kGs : Url::Scheme::kS3;
  u.host = config_.bucket;
  u.path = config_.prefix;
  return key.empty() ? u.ToString() : u.Join(key).ToString();
}

Result<std::string> S3Protocol::ListUrl(std::string_view continuation_token,
                                        uint32_t max_keys) const {
  // The signer sorts the query itself.
  return config_.ListUrl(continuation_token) + "&max-keys=" + std::to_string(max_keys);
}

Result<ObjectListing> S3Protocol::ParseListing(std::string_view xml) const {
  const std::string name = Name("");
  auto bad = [&](const std::string& what) { return Err(Status::Corruption(name + ": " + what)); };
  auto root = ParseXml(xml);
  if (!root) return bad("not a ListObjectsV2 answer (" + root.error().message() + ")");
  if (root->name != "ListBucketResult") return bad("not a ListObjectsV2 answer");
  const std::string prefix = config_.prefix.empty() ? "" : config_.prefix + "/";
  ObjectListing out;
  for (const XmlNode& c : root->children) {
    if (c.name != "Contents") continue;
    const XmlNode* key = c.Child("Key");
    const XmlNode* size = c.Child("Size");
    const XmlNode* time = c.Child("LastModified");
    ObjectListing::Entry e;
    char* size_end = nullptr;
    const std::string size_str = size != nullptr ? size->text : "";
    e.size = std::strtoull(size_str.c_str(), &size_end, 10);
    if (key == nullptr || size_str.empty() ||
        !std::isdigit(static_cast<unsigned char>(size_str[0])) || *size_end != '\0' ||
        time == nullptr || !ParseMtime(time->text, &e)) {
      return bad("a listing entry without a valid Key, Size or LastModified");
    }
    if (key->text.compare(0, prefix.size(), prefix) != 0) {
      return bad("listed a key outside the prefix");
    }
    e.key = key->text.substr(prefix.size());
    if (e.key.empty()) continue;  // the prefix's own folder marker
    out.entries.push_back(std::move(e));
  }
  const XmlNode* truncated = root->Child("IsTruncated");
  if (truncated != nullptr && truncated->text == "true") {
    const XmlNode* next = root->Child("NextContinuationToken");
    if (next == nullptr || next->text.empty()) {
      return bad("a truncated listing without a new continuation token");
    }
    out.next_token = next->text;
  }
  return out;
}

}  // namespace pcrfs
