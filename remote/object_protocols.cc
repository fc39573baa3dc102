#include "remote/object_protocols.h"

#include <cstdlib>

#include "remote/xml.h"

namespace pcrfs {

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
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Err(Status::Corruption(name + ": not a ListObjectsV2 answer"));
  }
  const std::string prefix = config_.prefix.empty() ? "" : config_.prefix + "/";
  ObjectListing out;
  for (size_t p = xml.find("<Contents>"); p != std::string_view::npos;
       p = xml.find("<Contents>", p + 10)) {
    const size_t end = xml.find("</Contents>", p);
    if (end == std::string_view::npos) {
      return Err(Status::Corruption(name + ": a listing entry is cut"));
    }
    auto key_xml = XmlElement(xml, "Key", p, end);
    auto size_text = XmlElement(xml, "Size", p, end);
    auto time_text = XmlElement(xml, "LastModified", p, end);
    std::optional<std::string> key = key_xml ? XmlText(*key_xml) : std::nullopt;
    ObjectListing::Entry e;
    char* size_end = nullptr;
    const std::string size_str(size_text.value_or(""));
    e.size = std::strtoull(size_str.c_str(), &size_end, 10);
    if (!key || size_str.empty() || size_str[0] == '-' || *size_end != '\0' || !time_text ||
        !ParseIsoTime(*time_text, &e.mtime_sec, &e.mtime_nsec)) {
      return Err(
          Status::Corruption(name + ": a listing entry without a valid Key, Size or LastModified"));
    }
    if (key->compare(0, prefix.size(), prefix) != 0) {
      return Err(Status::Corruption(name + ": listed a key outside the prefix"));
    }
    e.key = key->substr(prefix.size());
    if (e.key.empty()) continue;  // the prefix's own folder marker
    out.entries.push_back(std::move(e));
  }
  const auto truncated = XmlElement(xml, "IsTruncated");
  if (truncated && *truncated == "true") {
    const auto next = XmlElement(xml, "NextContinuationToken");
    auto next_text = next ? XmlText(*next) : std::nullopt;
    if (!next_text || next_text->empty()) {
      return Err(
          Status::Corruption(name + ": a truncated listing without a new continuation token"));
    }
    out.next_token = std::move(*next_text);
  }
  return out;
}

}  // namespace pcrfs
