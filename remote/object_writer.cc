#include "remote/object_writer.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/file_util.h"
#include "remote/object_protocols.h"
#include "remote/sigv4.h"
#include "remote/url.h"
#include "remote/xml.h"

namespace pcrfs {
namespace {

// The longest answer a write takes (an XML result or error).
constexpr uint64_t kMaxAnswerBytes = uint64_t{1} << 20;

std::string Quoted(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') return std::string(etag);
  return "\"" + std::string(etag) + "\"";
}

// A local file whose parts PutFile uploads, read one part at a time.
struct LocalFile {
  std::string path;
  UniqueFd fd;
  uint64_t size = 0;

  Result<std::string> Read(ByteRange r) const {
    std::string buf(r.length, '\0');
    PCRFS_RETURN_ERR_IF_ERROR(PreadFull(fd.get(), buf.data(), buf.size(), r.offset, path));
    return buf;
  }
};

Result<LocalFile> OpenLocalFile(const std::string& path) {
  auto fd = OpenFile(path, O_RDONLY | O_CLOEXEC);
  if (!fd) return Err(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Err(Status::FromErrno(path, errno));
  return LocalFile{path, std::move(*fd), static_cast<uint64_t>(st.st_size)};
}

}  // namespace

std::vector<ByteRange> PlanParts(uint64_t size, uint64_t part_size, uint32_t max_parts) {
  std::vector<ByteRange> parts;
  if (size == 0) return parts;
  part_size = std::max<uint64_t>(part_size, 1);
  if (max_parts > 0 && (size + part_size - 1) / part_size > max_parts) {
    part_size = (size + max_parts - 1) / max_parts;
  }
  for (uint64_t off = 0; off < size; off += part_size) {
    parts.push_back({off, std::min(part_size, size - off)});
  }
  return parts;
}

Result<std::string> ParseUploadId(const std::string& name, std::string_view body) {
  auto doc = ParseXml(body);
  const XmlNode* id =
      doc && doc->name == "InitiateMultipartUploadResult" ? doc->Child("UploadId") : nullptr;
  if (id == nullptr || id->text.empty()) {
    return Err(Status::Corruption(name + ": CreateMultipartUpload answered without an UploadId"));
  }
  return id->text;
}

std::string CompleteMultipartBody(const std::vector<std::string>& etags) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    std::string etag;
    for (char c : Quoted(etags[i])) {  // an ETag is quoted hex; escape what XML needs anyway
      if (c == '&') {
        etag += "&amp;";
      } else if (c == '<') {
        etag += "&lt;";
      } else if (c == '"') {
        etag += "&quot;";
      } else {
        etag += c;
      }
    }
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etag +
           "</ETag></Part>";
  }
  return xml + "</CompleteMultipartUpload>";
}

Result<std::string> CheckS3WriteAnswer(const std::string& name, std::string_view body,
                                       std::string_view root) {
  auto doc = ParseXml(body);
  if (doc && doc->name == "Error") {
    const XmlNode* code = doc->Child("Code");
    return Err(Status::IOError(name + ": " +
                               (code != nullptr ? ServerText(code->text) : std::string("error")) +
                               " (after 200)"));
  }
  if (!doc || doc->name != root) {
    return Err(Status::Corruption(name + ": not a " + std::string(root) + " answer"));
  }
  const XmlNode* etag = doc->Child("ETag");
  return etag != nullptr ? etag->text : std::string();
}

S3ObjectWriter::S3ObjectWriter(std::shared_ptr<HttpClient> http, S3Config config,
                               uint64_t part_size, uint64_t max_copy_object)
    : http_(std::move(http)),
      config_(std::move(config)),
      part_size_(std::max(part_size, kMinPartSize)),
      max_copy_object_(std::clamp(max_copy_object, kMinPartSize, kMaxCopyObject)) {}

std::string S3ObjectWriter::Name(std::string_view key) const {
  return S3Protocol(config_).Name(key);
}

std::string S3ObjectWriter::CopySource(std::string_view key) const {
  const std::string full =
      config_.prefix.empty() ? std::string(key) : config_.prefix + "/" + std::string(key);
  return "/" + config_.bucket + "/" + UriEncode(full, /*keep_slash=*/true);
}

Result<HttpResponse> S3ObjectWriter::Send(HttpRequest req) const {
  req.max_body_bytes = kMaxAnswerBytes;
  return http_->FetchBlocking(std::move(req));
}

Status S3ObjectWriter::Put(std::string_view key, std::string bytes) {
  HttpRequest req;
  req.method = HttpRequest::Method::kPut;
  req.url = config_.ObjectUrl(key);
  req.upload_sha256 = Sha256Hex(bytes);
  req.upload = std::move(bytes);
  auto r = Send(std::move(req));
  return r ? Status::OK() : r.error();
}

Status S3ObjectWriter::PutFile(std::string_view key, const std::string& path) {
  auto file = OpenLocalFile(path);
  if (!file) return file.error();
  const uint64_t size = file->size;
  auto read = [&](ByteRange r) { return file->Read(r); };
  if (size <= part_size_) {
    auto bytes = read({0, size});
    if (!bytes) return bytes.error();
    return Put(key, std::move(*bytes));
  }
  const std::string url = config_.ObjectUrl(key);
  return Multipart(key, size, part_size_,
                   [&](uint32_t n, ByteRange r, const std::string& id) -> Result<std::string> {
                     auto bytes = read(r);
                     if (!bytes) return Err(bytes.error());
                     HttpRequest req;
                     req.method = HttpRequest::Method::kPut;
                     req.url = url + "?partNumber=" + std::to_string(n) +
                               "&uploadId=" + UriEncode(id, false);
                     req.upload_sha256 = Sha256Hex(*bytes);
                     req.upload = std::move(*bytes);
                     auto ans = Send(std::move(req));
                     if (!ans) return Err(ans.error());
                     if (ans->etag.empty()) {
                       return Err(Status::Corruption(Name(key) + ": part " + std::to_string(n) +
                                                     " answered without an ETag"));
                     }
                     return ans->etag;
                   });
}

Status S3ObjectWriter::Multipart(
    std::string_view key, uint64_t size, uint64_t part_size,
    const std::function<Result<std::string>(uint32_t, ByteRange, const std::string&)>& put_part) {
  const std::string url = config_.ObjectUrl(key);
  const std::string name = Name(key);
  HttpRequest create;
  create.method = HttpRequest::Method::kPost;
  create.url = url + "?uploads";
  auto created = Send(std::move(create));
  if (!created) return created.error();
  auto id = ParseUploadId(name, created->body);
  if (!id) return id.error();
  const std::string id_query = "uploadId=" + UriEncode(*id, false);
  Status s;
  std::vector<std::string> etags;
  const auto parts = PlanParts(size, part_size);
  for (size_t i = 0; i < parts.size() && s.ok(); ++i) {
    auto etag = put_part(static_cast<uint32_t>(i + 1), parts[i], *id);
    if (etag) {
      etags.push_back(std::move(*etag));
    } else {
      s = etag.error();
    }
  }
  if (s.ok()) {
    HttpRequest complete;
    complete.method = HttpRequest::Method::kPost;
    complete.url = url + "?" + id_query;
    complete.upload = CompleteMultipartBody(etags);
    complete.upload_sha256 = Sha256Hex(complete.upload);
    complete.headers.emplace_back("Content-Type", "application/xml");
    auto done = Send(std::move(complete));
    if (done) {
      auto checked = CheckS3WriteAnswer(name, done->body, "CompleteMultipartUploadResult");
      if (checked) return Status::OK();
      s = checked.error();
    } else {
      s = done.error();
    }
  }
  // Best effort: an upload left behind costs storage until a lifecycle rule removes it.
  HttpRequest abort;
  abort.method = HttpRequest::Method::kDelete;
  abort.url = url + "?" + id_query;
  (void)Send(std::move(abort));
  return s;
}

Status S3ObjectWriter::Copy(const ObjectWriter& from, std::string_view src_key, uint64_t size,
                            std::string_view key) {
  const auto* src = dynamic_cast<const S3ObjectWriter*>(&from);
  if (src == nullptr) {
    return Status::InvalidArgument(from.Name(src_key) + ": cannot be copied to " + Name(key) +
                                   " on the server (another service)");
  }
  const std::string source = src->CopySource(src_key);
  const std::string name = Name(key);
  if (size <= max_copy_object_) {
    HttpRequest req;
    req.method = HttpRequest::Method::kPut;
    req.url = config_.ObjectUrl(key);
    req.headers.emplace_back("x-amz-copy-source", source);
    auto r = Send(std::move(req));
    if (!r) return r.error();
    auto checked = CheckS3WriteAnswer(name, r->body, "CopyObjectResult");
    return checked ? Status::OK() : checked.error();
  }
  const std::string url = config_.ObjectUrl(key);
  return Multipart(
      key, size, std::min(max_copy_object_, kCopyPartSize),
      [&](uint32_t n, ByteRange r, const std::string& id) -> Result<std::string> {
        HttpRequest req;
        req.method = HttpRequest::Method::kPut;
        req.url = url + "?partNumber=" + std::to_string(n) + "&uploadId=" + UriEncode(id, false);
        req.headers.emplace_back("x-amz-copy-source", source);
        req.headers.emplace_back(
            "x-amz-copy-source-range",
            "bytes=" + std::to_string(r.offset) + "-" + std::to_string(r.offset + r.length - 1));
        auto ans = Send(std::move(req));
        if (!ans) return Err(ans.error());
        return CheckS3WriteAnswer(name, ans->body, "CopyPartResult");
      });
}

Status S3ObjectWriter::Delete(std::string_view key) {
  HttpRequest req;
  req.method = HttpRequest::Method::kDelete;
  req.url = config_.ObjectUrl(key);
  auto r = Send(std::move(req));
  if (!r && !r.error().IsNotFound()) return r.error();
  return Status::OK();
}

std::string AzureBlockId(uint32_t n) {
  static constexpr char kChars[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char digits[8];
  std::snprintf(digits, sizeof digits, "%06u", n % 1000000);
  std::string out;
  for (int g = 0; g < 2; ++g) {
    const uint32_t v = (static_cast<uint32_t>(static_cast<uint8_t>(digits[3 * g])) << 16) |
                       (static_cast<uint32_t>(static_cast<uint8_t>(digits[3 * g + 1])) << 8) |
                       static_cast<uint8_t>(digits[3 * g + 2]);
    for (int s : {18, 12, 6, 0}) out += kChars[(v >> s) & 63];
  }
  return out;
}

std::string AzureBlockListBody(const std::vector<std::string>& ids) {
  std::string xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
  for (const std::string& id : ids) xml += "<Latest>" + id + "</Latest>";
  return xml + "</BlockList>";
}

AzureObjectWriter::AzureObjectWriter(std::shared_ptr<HttpClient> http, AzureConfig config,
                                     uint64_t part_size)
    : http_(std::move(http)),
      config_(std::move(config)),
      protocol_(config_),
      part_size_(std::max<uint64_t>(part_size, 1)) {}

std::string AzureObjectWriter::Name(std::string_view key) const { return protocol_.Name(key); }

Result<HttpResponse> AzureObjectWriter::Send(HttpRequest req) const {
  req.max_body_bytes = kMaxAnswerBytes;
  // Shared Key signs the body's length.
  if (req.method != HttpRequest::Method::kDelete && req.method != HttpRequest::Method::kHead &&
      !req.upload.empty()) {
    req.headers.emplace_back("Content-Length", std::to_string(req.upload.size()));
  }
  return http_->FetchBlocking(std::move(req));
}

Status AzureObjectWriter::Put(std::string_view key, std::string bytes) {
  HttpRequest req;
  req.method = HttpRequest::Method::kPut;
  req.url = protocol_.ObjectUrl(key);
  req.headers.emplace_back("x-ms-blob-type", "BlockBlob");
  req.upload = std::move(bytes);
  auto r = Send(std::move(req));
  return r ? Status::OK() : r.error();
}

Status AzureObjectWriter::PutFile(std::string_view key, const std::string& path) {
  auto file = OpenLocalFile(path);
  if (!file) return file.error();
  const uint64_t size = file->size;
  auto read = [&](ByteRange r) { return file->Read(r); };
  if (size <= part_size_) {
    auto bytes = read({0, size});
    if (!bytes) return bytes.error();
    return Put(key, std::move(*bytes));
  }
  const std::string url = protocol_.ObjectUrl(key);
  std::vector<std::string> ids;
  const auto blocks = PlanParts(size, part_size_, kMaxBlocks);
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto bytes = read(blocks[i]);
    if (!bytes) return bytes.error();
    ids.push_back(AzureBlockId(static_cast<uint32_t>(i + 1)));
    HttpRequest req;
    req.method = HttpRequest::Method::kPut;
    req.url = url + "?comp=block&blockid=" + UriEncode(ids.back(), false);
    req.upload = std::move(*bytes);
    if (auto r = Send(std::move(req)); !r) return r.error();
  }
  // Uncommitted blocks are dropped by Azure after a week: nothing to abort on failure.
  HttpRequest list;
  list.method = HttpRequest::Method::kPut;
  list.url = url + "?comp=blocklist";
  list.upload = AzureBlockListBody(ids);
  list.headers.emplace_back("Content-Type", "application/xml");
  auto r = Send(std::move(list));
  return r ? Status::OK() : r.error();
}

Status AzureObjectWriter::Copy(const ObjectWriter& from, std::string_view src_key, uint64_t size,
                               std::string_view key) {
  const auto* src = dynamic_cast<const AzureObjectWriter*>(&from);
  if (src == nullptr || src->config_.account != config_.account) {
    return Status::InvalidArgument(from.Name(src_key) + ": cannot be copied to " + Name(key) +
                                   " on the server (another service or account)");
  }
  HttpRequest req;
  req.method = HttpRequest::Method::kPut;
  req.url = protocol_.ObjectUrl(key);
  req.headers.emplace_back("x-ms-copy-source", src->protocol_.ObjectUrl(src_key));
  auto r = Send(std::move(req));
  if (!r) return r.error();
  std::string status = r->copy_status;
  // A copy Azure runs in the background: its state is the destination's x-ms-copy-status.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  for (int polls = 0; status == "pending"; ++polls) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::IOError(Name(key) + ": the copy of " + src->Name(src_key) +
                             " is still pending after 10 minutes");
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(50 << std::min(polls, 5), 2000)));
    HttpRequest head;
    head.method = HttpRequest::Method::kHead;
    head.url = protocol_.ObjectUrl(key);
    auto h = http_->FetchBlocking(std::move(head));
    if (!h) return h.error();
    status = h->copy_status;
  }
  if (status != "success") {
    return Status::IOError(Name(key) + ": the copy of " + src->Name(src_key) + " ended " +
                           (status.empty() ? std::string("without a status") : ServerText(status)));
  }
  (void)size;  // checked by the caller's listing
  return Status::OK();
}

Status AzureObjectWriter::Delete(std::string_view key) {
  HttpRequest req;
  req.method = HttpRequest::Method::kDelete;
  req.url = protocol_.ObjectUrl(key);
  auto r = Send(std::move(req));
  if (!r && !r.error().IsNotFound()) return r.error();
  return Status::OK();
}

}  // namespace pcrfs
