#include "builder/object_target.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "builder/build_stages.h"
#include "builder/shard_part.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "index/compact_index.h"
#include "index/index_reader.h"
#include "index/store.h"
#include "remote/object_protocols.h"
#include "remote/remote_file.h"
#include "remote/sigv4.h"

namespace pcrfs::tools {
namespace fs = std::filesystem;
namespace {

constexpr char kStatePrefix[] = ".build/";  // the remote build state, removed on publishing
constexpr char kOptionsKey[] = ".build/options";

std::string MembersKey(uint32_t id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, ".build/%08u.members", id);
  return buf;
}

std::string RecordKey(uint32_t id) { return index::RecordFileName(id); }

// The record id of "records/NNNNNNNN.pcr" or ".build/NNNNNNNN.members"; false for other keys.
bool IdOf(const std::string& key, const char* format, uint32_t* id) {
  unsigned int v = 0;
  int used = 0;
  if (std::sscanf(key.c_str(), format, &v, &used) != 1 || static_cast<size_t>(used) != key.size()) {
    return false;
  }
  *id = v;
  return true;
}

// The size and CRC32C of a local file; false when it cannot be read.
bool SizeAndCrc(const std::string& path, uint64_t* size, uint32_t* crc) {
  auto fd = OpenFile(path, O_RDONLY | O_CLOEXEC);
  if (!fd) return false;
  std::vector<uint8_t> buf(uint64_t{1} << 20);
  *size = 0;
  *crc = 0;
  for (;;) {
    const ssize_t got = ::read(fd->get(), buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    if (got == 0) return true;
    *crc = crc32c::Extend(*crc, buf.data(), static_cast<size_t>(got));
    *size += static_cast<uint64_t>(got);
  }
}

// The files that make a store or a part what it is: published last.
int PublishRank(const std::string& name) {
  if (name == index::kCompactIndexFile || name == kPartFile) return 2;
  if (name == index::kManifestFile) return 1;
  return 0;
}

bool IsStoreObject(const std::string& key) {
  return key.starts_with(std::string(index::kRecordsDir) + "/") || key.starts_with(kStatePrefix) ||
         key == index::kCompactIndexFile || key == index::kManifestFile || key == kPartFile ||
         key == kListingFile || key == "provenance.json";
}

// PCRFS_TEST_S3_COPY_LIMIT=BYTES (tests only): the largest record a merge copies with one
// CopyObject, instead of S3's 5 GiB, so that a test server sees UploadPartCopy (parts of BYTES,
// 5 MiB at least) for records of a few MiB. Unset: S3's limit. Not a number of bytes: an error
// naming the variable (a test that set it wrongly would otherwise pass without a copy in parts).
Result<uint64_t> CopyLimit() {
  const char* v = std::getenv("PCRFS_TEST_S3_COPY_LIMIT");
  if (v == nullptr) return S3ObjectWriter::kMaxCopyObject;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*v < '1' || *v > '9' || *end != '\0' || errno == ERANGE) {
    return Err(Status::InvalidArgument("PCRFS_TEST_S3_COPY_LIMIT=" + std::string(v) +
                                       ": not a number of bytes"));
  }
  return n;
}

struct Clients {
  std::shared_ptr<ObjectClient> client;
  std::unique_ptr<ObjectWriter> writer;
};

Result<Clients> MakeClients(const StoreLocation& loc) {
  auto http = HttpClient::Create(ClientOptionsFor(loc));
  if (!http) return Err(http.error());
  std::shared_ptr<HttpClient> shared(std::move(*http));
  Clients c;
  if (loc.azure) {
    c.client = std::shared_ptr<ObjectClient>(
        MakeHttpObjectClient(shared, std::make_unique<AzureProtocol>(*loc.azure)));
    c.writer = std::make_unique<AzureObjectWriter>(shared, *loc.azure);
    return c;
  }
  auto copy_limit = CopyLimit();
  if (!copy_limit) return Err(copy_limit.error());
  c.client = std::shared_ptr<ObjectClient>(
      MakeHttpObjectClient(shared, std::make_unique<S3Protocol>(*loc.s3)));
  c.writer = std::make_unique<S3ObjectWriter>(shared, *loc.s3, S3ObjectWriter::kDefaultPartSize,
                                              *copy_limit);
  return c;
}

Result<StoreLocation> ResolveOutput(const std::string& url, const RemoteOptions& options) {
  PCRFS_RETURN_ERR_IF_ERROR(CheckOutputUrl(url));
  auto loc = ResolveLocation(url, options);
  if (!loc) return Err(loc.error());
  if (!loc->s3 && !loc->azure) return Err(Status::InvalidArgument(url + ": not a bucket URL"));
  if (loc->s3 ? loc->s3->prefix.empty() : loc->azure->prefix.empty()) {
    return Err(Status::InvalidArgument(loc->name + ": a store needs a prefix in the bucket "
                                                   "(s3://BUCKET/NAME, az://CONTAINER/NAME)"));
  }
  PCRFS_RETURN_ERR_IF_ERROR(StartCredentialRenewal(*loc));  // a long build outlives a token
  return loc;
}

}  // namespace

bool IsOutputUrl(const std::string& store) {
  const size_t colon = store.find("://");
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    const char c = store[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  return std::isalpha(static_cast<unsigned char>(store[0])) != 0;
}

Status CheckOutputUrl(const std::string& store) {
  const std::string shown = RedactUrl(store);
  if (store.size() > 5 && (store.starts_with("s3://") || store.starts_with("S3://"))) {
    return Status::OK();
  }
  if (IsAzureUrl(store)) return Status::OK();
  return Status::InvalidArgument(shown +
                                 ": cannot write a store there (pcr build and pcr merge write to "
                                 "a local folder, s3://BUCKET/PREFIX or az://CONTAINER/PREFIX)");
}

Result<std::unique_ptr<ObjectTarget>> ObjectTarget::Open(const std::string& url,
                                                         const RemoteOptions& options) {
  auto loc = ResolveOutput(url, options);
  if (!loc) return Err(loc.error());
  std::unique_ptr<ObjectTarget> t(new ObjectTarget());
  t->location_ = std::move(*loc);
  auto clients = MakeClients(t->location_);
  if (!clients) return Err(clients.error());
  t->client_ = std::move(clients->client);
  t->writer_ = std::move(clients->writer);
  const std::string cache = !t->location_.options.cache_dir.empty()
                                ? t->location_.options.cache_dir
                                : DefaultCacheDir(t->location_.name);
  if (cache.empty()) {
    return Err(Status::InvalidArgument(t->location_.name +
                                       ": no folder for the local draft (set -o cache_dir)"));
  }
  // Private (the draft holds the source's images), and one folder per URL: builds of several
  // URLs (shards on one node) may share a cache_dir.
  const std::string dir = cache + "/build/" + Sha256Hex(t->location_.name).substr(0, 16);
  for (const std::string& d : {cache, cache + "/build", dir}) {
    if (Status s = MakePrivateDir(d); !s.ok()) return Err(std::move(s));
  }
  t->local_store_ = dir + "/store";
  return t;
}

ObjectTarget::~ObjectTarget() = default;

Result<std::map<std::string, uint64_t>> ObjectTarget::ListAll() {
  std::map<std::string, uint64_t> out;
  std::string token;
  for (;;) {
    auto page = client_->List(token, 1000);
    if (!page) return Err(page.error());
    for (const auto& e : page->entries) out[e.key] = e.size;
    if (page->next_token.empty() || page->next_token == token) break;
    token = page->next_token;
  }
  return out;
}

Status ObjectTarget::CheckAndClear(bool force, bool resume) {
  auto objects = ListAll();
  if (!objects) return objects.error();
  bool is_store = false;
  uint64_t finished = 0;
  for (const auto& [key, size] : *objects) {
    if (!IsStoreObject(key)) {
      return Status::InvalidArgument(name() + ": holds objects that are not a pcrfs store's (" +
                                     writer_->Name(key) + "); refusing to write there");
    }
    is_store = is_store || PublishRank(key) > 0;
    uint32_t id;
    if (IdOf(key, ".build/%8u.members%n", &id)) ++finished;
  }
  if (is_store && !force) {
    return Status::AlreadyExists(name() + ": already exists (use --force to replace it)");
  }
  if (finished > 0 && !resume && !force) {
    return Status::InvalidArgument(
        name() + ": an interrupted build left " + std::to_string(finished) + " finished record" +
        (finished == 1 ? "" : "s") + " there; --resume keeps " + (finished == 1 ? "it" : "them") +
        " (same options), --force discards " + (finished == 1 ? "it" : "them") +
        " and builds from the start");
  }
  // What makes it a store first, so nothing takes the half-replaced one for a whole one.
  for (const char* key : {index::kCompactIndexFile, kPartFile, index::kManifestFile}) {
    if (objects->contains(key)) PCRFS_RETURN_IF_ERROR(writer_->Delete(key));
  }
  if (!resume) {
    for (const auto& [key, size] : *objects) {
      if (key.starts_with(kStatePrefix)) PCRFS_RETURN_IF_ERROR(writer_->Delete(key));
    }
  }
  return Status::OK();
}

Status ObjectTarget::PrepareResume() {
  const std::string dir = StoreDraft::PartialDir(local_store_);
  const std::string state = dir + "/.build";
  PCRFS_RETURN_IF_ERROR(RemoveTree(state));
  std::error_code ec;
  fs::create_directories(dir + "/" + index::kRecordsDir, ec);
  fs::create_directories(state, ec);
  if (ec) return Status::IOError(state + ": cannot create: " + ec.message());
  auto objects = ListAll();
  if (!objects) return objects.error();
  if (!objects->contains(kOptionsKey)) return Status::OK();  // nothing to resume
  auto get_small = [&](const std::string& key) -> Result<std::string> {
    ObjectGet req;
    req.key = key;
    req.max_body_bytes = 1 << 20;
    auto r = client_->GetBlocking(std::move(req));
    if (!r) return Err(r.error());
    return std::move(r->body);
  };
  auto options = get_small(kOptionsKey);
  if (!options) return options.error();
  PCRFS_RETURN_IF_ERROR(WriteFileAtomic(state + "/options", options->data(), options->size()));
  options_uploaded_ = true;
  for (const auto& [key, size] : *objects) {
    uint32_t id;
    if (!IdOf(key, ".build/%8u.members%n", &id)) continue;
    auto members = get_small(key);
    if (!members) return members.error();
    char fp[65] = {};
    unsigned long long want_size = 0;
    unsigned int want_crc = 0;
    if (std::sscanf(members->c_str(), "%64s %llu %u", fp, &want_size, &want_crc) != 3) continue;
    const auto rec = objects->find(RecordKey(id));
    if (rec == objects->end() || rec->second != want_size) continue;
    const std::string path = StoreDraft(local_store_).RecordPath(id);
    uint64_t have_size = 0;
    uint32_t have_crc = 0;
    if (!SizeAndCrc(path, &have_size, &have_crc) || have_size != want_size ||
        have_crc != want_crc) {
      // Not on this machine (another node ran the first attempt), or not these bytes.
      ObjectGet req;
      req.key = RecordKey(id);
      req.expected_size = want_size;
      req.body_file = path;
      if (auto r = client_->GetBlocking(std::move(req)); !r) return r.error();
      if (!SizeAndCrc(path, &have_size, &have_crc) || have_size != want_size ||
          have_crc != want_crc) {
        ::unlink(path.c_str());  // rebuilt and uploaded again
        continue;
      }
    }
    ::unlink(path.c_str());  // checked: read from the bucket from now on (bounded local disk)
    const std::string fingerprint = fp;
    PCRFS_RETURN_IF_ERROR(WriteFileAtomic(StoreDraft(local_store_).FingerprintPath(id),
                                          fingerprint.data(), fingerprint.size()));
    MutexLock lock(&mu_);
    written_.insert(id);
    copied_[id] = want_size;
    crcs_[id] = want_crc;
  }
  return Status::OK();
}

void ObjectTarget::AddCopiedRecord(uint32_t id, uint64_t size) {
  MutexLock lock(&mu_);
  copied_[id] = size;
  written_.insert(id);
}

Status ObjectTarget::RecordFinished(uint32_t id, const std::string& path,
                                    const std::string& fingerprint) {
  if (!options_uploaded_) {
    const std::string options =
        fs::path(path).parent_path().parent_path().string() + "/.build/options";
    PCRFS_RETURN_IF_ERROR(writer_->PutFile(kOptionsKey, options));
    options_uploaded_ = true;
  }
  uint64_t size = 0;
  uint32_t crc = 0;
  if (!SizeAndCrc(path, &size, &crc)) return Status::IOError(path + ": cannot read the record");
  PCRFS_RETURN_IF_ERROR(writer_->PutFile(RecordKey(id), path));
  PCRFS_RETURN_IF_ERROR(writer_->Put(
      MembersKey(id), fingerprint + " " + std::to_string(size) + " " + std::to_string(crc) + "\n"));
  // Local disk holds the record being written only: the rest is read from the bucket.
  if (::unlink(path.c_str()) != 0) return Status::FromErrno(path, errno);
  MutexLock lock(&mu_);
  written_.insert(id);
  copied_[id] = size;
  crcs_[id] = crc;
  return Status::OK();
}

bool ObjectTarget::RecordSizeAndCrc(uint32_t id, uint64_t* size, uint32_t* crc) {
  MutexLock lock(&mu_);
  const auto s = copied_.find(id);
  const auto c = crcs_.find(id);
  if (s == copied_.end() || c == crcs_.end()) return false;
  *size = s->second;
  *crc = c->second;
  return true;
}

Result<std::unique_ptr<RandomAccessFile>> ObjectTarget::OpenRecord(uint32_t id,
                                                                   const std::string& /*path*/) {
  MutexLock lock(&mu_);
  const auto it = copied_.find(id);
  if (it == copied_.end()) return std::unique_ptr<RandomAccessFile>();
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<RemoteFile>(client_, RecordKey(id), it->second));
}

Result<std::unique_ptr<index::Store>> ObjectTarget::OpenStore(const std::string& dir) {
  bool copied;
  {
    MutexLock lock(&mu_);
    copied = !copied_.empty();
  }
  if (!copied) return index::Store::Open(dir);
  StoreLocation loc = location_;
  loc.dir = dir;
  loc.converted_index = nullptr;
  return OpenStoreAt(loc, client_);
}

Status ObjectTarget::Publish(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path().filename().string());
  }
  if (ec) return Status::IOError(dir + ": " + ec.message());
  std::stable_sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return PublishRank(a) != PublishRank(b) ? PublishRank(a) < PublishRank(b) : a < b;
  });
  // What an older store or part at the prefix left that this one does not have.
  auto objects = ListAll();
  if (!objects) return objects.error();
  for (const auto& [key, size] : *objects) {
    uint32_t id;
    bool stale;
    if (IdOf(key, "records/%8u.pcr%n", &id)) {
      MutexLock lock(&mu_);
      stale = !written_.contains(id);
    } else {
      stale = !key.starts_with(kStatePrefix) &&
              std::find(files.begin(), files.end(), key) == files.end();
    }
    if (stale) PCRFS_RETURN_IF_ERROR(writer_->Delete(key));
  }
  for (const std::string& f : files) {
    PCRFS_RETURN_IF_ERROR(writer_->PutFile(f, dir + "/" + f));
  }
  for (const auto& [key, size] : *objects) {
    if (key.starts_with(kStatePrefix)) PCRFS_RETURN_IF_ERROR(writer_->Delete(key));
  }
  // The state written by this run (the listing above may predate it).
  PCRFS_RETURN_IF_ERROR(writer_->Delete(kOptionsKey));
  std::set<uint32_t> written;
  {
    MutexLock lock(&mu_);
    written = written_;
  }
  for (uint32_t id : written) {
    bool built;  // by this build (a merge's copies have no .build object)
    {
      MutexLock lock(&mu_);
      built = crcs_.contains(id);
    }
    if (built) PCRFS_RETURN_IF_ERROR(writer_->Delete(MembersKey(id)));
  }
  return Status::OK();
}

Result<std::unique_ptr<ObjectPart>> ObjectPart::Open(const std::string& url,
                                                     const RemoteOptions& options) {
  auto loc = ResolveOutput(url, options);
  if (!loc) return Err(loc.error());
  auto clients = MakeClients(*loc);
  if (!clients) return Err(clients.error());
  auto p = std::make_unique<ObjectPart>();
  p->location = std::move(*loc);
  p->client = std::move(clients->client);
  p->writer = std::move(clients->writer);
  return p;
}

}  // namespace pcrfs::tools
