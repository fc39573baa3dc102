#include "location/store_location.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/file_util.h"
#include "common/log.h"
#include "common/secret.h"
#include "remote/aws_credential_source.h"
#include "remote/aws_credentials.h"
#include "remote/object_protocols.h"
#include "remote/remote_file.h"
#include "remote/sigv4.h"

namespace pcrfs {
namespace {

constexpr uint64_t kMaxEtagBytes = 4096;

const char* Getenv(const EnvLookup& env, const char* name) {
  return env ? env(name) : std::getenv(name);
}

// The ETag saved beside a downloaded file, or "" when either is missing (then the download is
// unconditional).
std::string SavedEtag(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  auto bytes = ReadWholeFile(path + ".etag", kMaxEtagBytes);
  if (!bytes) return "";
  return std::string(bytes->begin(), bytes->end());
}

// `e` with "NAME: " in front (its code and errno kept), unless it starts with NAME already: an
// s3:// store's errors name the store as the user wrote it, not only an endpoint URL, a
// profile or an STS role.
Status NamingStore(const std::string& name, const Status& e) {
  if (e.message().starts_with(name)) return e;
  std::string msg = name + ": " + e.message();
  switch (e.code()) {
    case Status::Code::kNotFound:
      return Status::NotFound(std::move(msg));
    case Status::Code::kCorruption:
      return Status::Corruption(std::move(msg));
    case Status::Code::kIOError:
      return Status::IOError(std::move(msg), e.sys_errno());
    case Status::Code::kNotSupported:
      return Status::NotSupported(std::move(msg));
    case Status::Code::kAlreadyExists:
      return Status::AlreadyExists(std::move(msg));
    case Status::Code::kResourceExhausted:
      return Status::ResourceExhausted(std::move(msg));
    default:
      return Status::InvalidArgument(std::move(msg));
  }
}

// Downloads `name` of the store into the cache folder, conditional on its saved ETag. With
// `missing`, a 404 sets it and is no error; *cached is set when the server said 304 (the
// folder's copy is used). An index (index.pcri, an older store's index.lmdb) larger than 8 MiB
// comes in parallel ranged GETs (DownloadRanged), the manifest in one GET; index.pcri's size
// must be the one its header states (a server's claim decides nothing).
Status FetchOne(ObjectClient& client, const StoreLocation& loc, const char* name, bool* cached,
                bool* missing = nullptr) {
  const std::string dest = loc.dir + "/" + name;
  RangedDownloadOptions ranged;
  if (std::string_view(name) == index::kCompactIndexFile) {
    ranged.declared_size = [&](std::string_view first) {
      return index::CompactIndexDeclaredSize(client.Name(name), first);
    };
  }
  auto r = std::string_view(name) == index::kManifestFile
               ? Download(client, name, dest, SavedEtag(dest), index::kMaxManifestBytes)
               : DownloadRanged(client, name, dest, SavedEtag(dest), ranged);
  if (r && !r->modified) *cached = true;
  if (!r) {
    const Status& e = r.error();
    if (missing != nullptr && e.IsNotFound() && !e.message().ends_with("(ContainerNotFound)") &&
        !e.message().ends_with("(NoSuchBucket)")) {
      *missing = true;
      return Status::OK();
    }
    if (e.sys_errno() == EACCES && loc.s3 && !loc.s3->no_credentials.empty()) {
      // Unsigned because nothing was found: say that, not only the server's 403.
      const std::string& m = e.message();
      const size_t status = m.rfind(": ");
      return Status::IOError(loc.name + ": refused an anonymous request (" +
                                 (status == std::string::npos ? m : m.substr(status + 2)) +
                                 ") and " + loc.s3->no_credentials +
                                 "; -o no_sign reads public buckets only",
                             EACCES);
    }
    if (e.IsNotFound()) {
      // A 404 for a whole container or bucket (a typo in its name) is not a folder without a
      // store: say which, with the service's code (the message ends "(CODE)").
      for (const auto& [code, what] : {std::pair{"(ContainerNotFound)", "no such container"},
                                       std::pair{"(NoSuchBucket)", "no such bucket"}}) {
        if (e.message().ends_with(code)) {
          return Status::InvalidArgument(loc.name + ": " + what + " (404 " +
                                         std::string(code + 1, std::strlen(code) - 2) + ")");
        }
      }
      if (std::string_view(name) == index::kManifestFile) {
        return Status::InvalidArgument(loc.name + ": not a pcrfs store (no " +
                                       index::kManifestFile + ")");
      }
      return Status::Corruption(loc.name + ": damaged store: " + name + " is missing");
    }
    return loc.s3 ? NamingStore(loc.name, e) : e;
  }
  if (r->modified || !r->etag.empty()) {
    const std::string etag_path = dest + ".etag";
    if (r->etag.empty()) {
      ::unlink(etag_path.c_str());  // no ETag: the next mount downloads again
    } else if (Status s = WriteFileAtomic(etag_path, r->etag.data(), r->etag.size(), 0600);
               !s.ok()) {
      return s;
    }
  }
  return Status::OK();
}

// An older store (index.lmdb only): its index converted to index.pcri in the cache folder, once
// per version of index.lmdb (its trailer, which holds its size and CRC, is kept in
// index.pcri.from), so a remount neither downloads nor converts it again. A cached index.pcri
// that is no conversion of this index.lmdb (the store shipped index.pcri before) is replaced.
// A conversion made now leaves its parse in *converted.
Status ConvertCachedIndex(const std::string& dir,
                          std::shared_ptr<const index::IndexReader>* converted) {
  const std::string lmdb_path = dir + "/" + index::kIndexFile;
  const std::string compact = dir + "/" + index::kCompactIndexFile;
  const std::string from = compact + ".from";
  auto fd = OpenFile(lmdb_path, O_RDONLY | O_CLOEXEC);
  if (!fd) return fd.error();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0 || st.st_size < 32) {
    return Status::Corruption(lmdb_path + ": damaged or not a pcrfs index: file too small");
  }
  uint8_t trailer[32];
  PCRFS_RETURN_IF_ERROR(PreadFull(fd->get(), trailer, sizeof(trailer),
                                  static_cast<uint64_t>(st.st_size) - 32, lmdb_path));
  static const char kHex[] = "0123456789abcdef";
  std::string identity;
  for (uint8_t b : trailer) {
    identity += kHex[b >> 4];
    identity += kHex[b & 15];
  }
  auto known = ReadWholeFile(from, 4096);
  if (known && std::string(known->begin(), known->end()) == identity &&
      ::access(compact.c_str(), F_OK) == 0) {
    return Status::OK();
  }
  ::unlink(from.c_str());
  ::unlink((compact + ".etag").c_str());
  auto source = index::LmdbSourceOf(lmdb_path);
  if (!source) return source.error();
  std::unique_ptr<index::CompactIndex> parsed;
  auto bytes = index::ConvertLmdbIndex(lmdb_path, *source, &parsed);
  if (!bytes) return bytes.error();
  PCRFS_RETURN_IF_ERROR(index::WriteCompactIndexFile(compact, *bytes));
  if (::chmod(compact.c_str(), 0600) != 0) return Status::FromErrno("chmod " + compact, errno);
  PCRFS_RETURN_IF_ERROR(WriteFileAtomic(from, identity.data(), identity.size(), 0600));
  index::FileIdentity written;
  if (::stat(compact.c_str(), &st) == 0) {
    written = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
               static_cast<uint64_t>(st.st_size),
               st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
               st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
  }
  *converted = index::IndexReader::FromCompact(std::move(parsed), written);
  return Status::OK();
}

// Downloads the store's metadata into loc->dir (manifest.json, then index.pcri or an older
// store's index.lmdb, converted). *cached: a file came from the folder (a 304).
Status FetchFiles(ObjectClient& client, StoreLocation* loc, bool* cached) {
  loc->converted_index = nullptr;
  PCRFS_RETURN_IF_ERROR(FetchOne(client, *loc, index::kManifestFile, cached));
  // Index format 4 when the store ships it; else an older store's index.lmdb, which
  // Store::Open converts (in memory) through the same checks.
  bool no_compact = false;
  PCRFS_RETURN_IF_ERROR(FetchOne(client, *loc, index::kCompactIndexFile, cached, &no_compact));
  const std::string compact = loc->dir + "/" + index::kCompactIndexFile;
  const std::string from = compact + ".from";  // what a converted index.pcri was converted from
  if (no_compact) {
    PCRFS_RETURN_IF_ERROR(FetchOne(client, *loc, index::kIndexFile, cached));
    return ConvertCachedIndex(loc->dir, &loc->converted_index);
  }
  const std::string stale = loc->dir + "/" + index::kIndexFile;  // not needed any more
  ::unlink(stale.c_str());
  ::unlink((stale + ".etag").c_str());
  ::unlink(from.c_str());
  return Status::OK();
}

// The metadata files of a cache folder and their ETags removed: nothing that failed a check
// stays, and the next fetch of each is unconditional.
void ForgetMetadata(const std::string& dir) {
  for (const char* name : {index::kManifestFile, index::kCompactIndexFile, index::kIndexFile}) {
    const std::string path = dir + "/" + name;
    ::unlink(path.c_str());
    ::unlink((path + ".etag").c_str());
  }
  ::unlink((dir + "/" + index::kCompactIndexFile + ".from").c_str());
}

// Absolute: the daemon changes to / when it forks, and opens these again after.
void MakeOptionPathsAbsolute(RemoteOptions* o) {
  std::error_code ec;
  for (std::string* path : {&o->headers_file, &o->ca_file, &o->cache_dir, &o->sas_file,
                            &o->query_file, &o->s3.credentials_file, &o->s3.config_file}) {
    if (!path->empty()) *path = std::filesystem::absolute(*path, ec).lexically_normal();
  }
}

}  // namespace

std::string DefaultCacheDir(const std::string& redacted_url, const EnvLookup& env) {
  const std::string key = Sha256Hex(redacted_url);
  if (::geteuid() == 0) return "/var/cache/pcrfs/" + key;
  const char* xdg = Getenv(env, "XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/pcrfs/" + key;
  // No /tmp fallback: a predictable folder there could be another user's.
  const std::string home = HomeDirectory(env);
  return home.empty() ? "" : home + "/.cache/pcrfs/" + key;
}

std::string PlainHttpCredentialsWarning(const StoreLocation& loc) {
  if (!loc.remote) return "";
  const Url& where = loc.s3 ? loc.s3->endpoint : loc.azure ? loc.azure->endpoint : loc.url;
  const bool credentials =
      loc.signer != nullptr || !loc.url.query.empty() || !loc.options.headers_file.empty();
  if (!credentials || where.scheme != Url::Scheme::kHttp || IsLoopbackHost(where.host)) return "";
  return loc.name + ": credentials go over plain http to " + where.Authority() +
         " (not this machine): anyone on the way can read or replay them; use https";
}

HttpClientOptions ClientOptionsFor(const StoreLocation& location) {
  HttpClientOptions o;
  o.ca_file = location.options.ca_file;
  o.headers_file = location.options.headers_file;
  o.deadline = location.options.timeout;
  o.max_connections_per_host = location.options.connections;
  o.max_connections = std::max(64, location.options.connections);
  o.signer = location.signer;
  return o;
}

Result<std::shared_ptr<ObjectClient>> MakeObjectClient(const StoreLocation& location) {
  if (!location.remote) {
    return Err(Status::InvalidArgument(location.name + ": a local store has no object client"));
  }
  if (location.client_factory) return location.client_factory(location);
  auto http = HttpClient::Create(ClientOptionsFor(location));
  if (!http) return Err(http.error());
  std::unique_ptr<ObjectProtocol> protocol;
  if (location.s3) {
    protocol = std::make_unique<S3Protocol>(*location.s3);
  } else if (location.azure) {
    protocol = std::make_unique<AzureProtocol>(*location.azure);
  } else {
    protocol = std::make_unique<HttpProtocol>(location.url);
  }
  return std::shared_ptr<ObjectClient>(
      MakeHttpObjectClient(std::shared_ptr<HttpClient>(std::move(*http)), std::move(protocol)));
}

namespace {

Result<StoreLocation> ResolveRemote(const std::string& store, const RemoteOptions& options,
                                    const EnvLookup& env) {
  StoreLocation loc;
  loc.name = store;
  loc.dir = store;
  if (!IsRemoteUrl(store)) return loc;
  loc.options = options;
  MakeOptionPathsAbsolute(&loc.options);
  if (!loc.options.headers_file.empty()) {
    WarnIfReadableByOthers(loc.options.headers_file, "option header_file");
  }
  if (IsAzureUrl(store)) {
    AzureOptions az;
    az.account = options.azure_account;
    az.endpoint = options.s3.endpoint;
    az.sas_file = loc.options.sas_file;
    az.no_sign = options.s3.no_sign;
    auto config = ResolveAzureConfig(store, az, env);
    if (!config) return Err(config.error());
    auto signer = MakeAzureSigner(*config);
    WipeString(config->key);  // held once, in the signer
    WipeString(config->sas);
    if (!signer) return Err(signer.error());
    loc.remote = true;
    loc.signer = std::move(*signer);
    loc.name = AzureProtocol(*config).Name("");
    loc.azure = std::move(*config);
    return loc;
  }
  auto url = ParseUrl(store);
  if (!url) return Err(url.error());
  loc.remote = true;
  loc.url = *url;
  loc.name = url->ToString();
  if (!url->is_s3() && !loc.options.query_file.empty()) {
    auto signer =
        QueryTokenSigner::FromFile(loc.options.query_file, QueryTokenSigner::Flavor::kHttpQuery);
    if (!signer) return Err(signer.error());
    loc.signer = std::move(*signer);
  }
  if (url->is_s3()) {
    auto s3 = ResolveS3Config(*url, loc.options.s3, env);
    if (!s3) return Err(NamingStore(loc.name, s3.error()));
    loc.s3 = std::move(*s3);
    loc.aws_credentials = loc.s3->aws_credentials;
    if (loc.aws_credentials != nullptr) {
      loc.signer = std::make_shared<SigV4RequestSigner>(loc.aws_credentials, loc.s3->region);
    }
  }
  return loc;
}

}  // namespace

Result<StoreLocation> ResolveLocation(const std::string& store, const RemoteOptions& options,
                                      const EnvLookup& env) {
  auto loc = ResolveRemote(store, options, env);
  // Before any request: a warning, not a refusal (a LAN MinIO over http is a choice).
  if (loc) {
    if (loc->signer != nullptr || !loc->url.query.empty() || !loc->options.headers_file.empty()) {
      KeepSecretsOutOfCoreDumps();
    }
    if (std::string warning = PlainHttpCredentialsWarning(*loc); !warning.empty()) {
      Log(LogLevel::kWarning, warning);
    }
  }
  return loc;
}

Result<StoreLocation> FetchMetadata(const std::string& store, const RemoteOptions& options,
                                    const EnvLookup& env, ObjectClientFactory client_factory) {
  auto resolved = ResolveLocation(store, options, env);
  if (!resolved || !resolved->remote) return resolved;
  StoreLocation loc = std::move(*resolved);
  loc.client_factory = std::move(client_factory);
  loc.dir = loc.options.cache_dir.empty() ? DefaultCacheDir(loc.name, env) : loc.options.cache_dir;
  if (loc.dir.empty()) {
    return Err(Status::InvalidArgument(
        loc.name +
        ": no cache folder: HOME is unset and the password database has no home for "
        "this user; give -o cache_dir"));
  }
  std::string created;
  if (Status s = MakePrivateDir(loc.dir, &created); !s.ok()) {
    return Err(Status::IOError(loc.name + ": " + s.message(), s.sys_errno()));
  }
  // A mount that fails leaves no folder it made (each failed URL used to leave an empty one).
  struct RemoveUnlessKept {
    std::string dir;
    ~RemoveUnlessKept() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } remove_created{created};
  auto client = MakeObjectClient(loc);
  if (!client) return Err(client.error());
  // Once more when the folder's copies fail the check (a crash, a bad sector): their ETags
  // would only get 304s for them, so they go, and the second fetch is unconditional.
  for (int attempt = 0;; ++attempt) {
    bool cached = false;
    Status s = FetchFiles(**client, &loc, &cached);
    if (s.ok()) {
      // The check Store::Open makes (index whole, manifest against it), made here so that
      // what fails it is not kept; the parse is kept for OpenStoreAt.
      auto store = OpenStoreAt(loc, nullptr);
      if (store) {
        loc.converted_index = (*store)->shared_index();
        remove_created.dir.clear();
        return loc;
      }
      s = store.error();
    }
    if (!s.IsCorruption()) return Err(s);
    ForgetMetadata(loc.dir);
    if (!cached || attempt > 0) return Err(s);
  }
}

Result<std::string> IndexIdentity(const std::string& dir) {
  // The index identifies the store's version: index.pcri by its header (which holds the file
  // size and, through the section table's CRC, every section's CRC), index.lmdb by its trailer.
  std::string index = dir + "/" + index::kCompactIndexFile;
  auto fd = OpenFile(index, O_RDONLY | O_CLOEXEC);
  const bool compact = fd.has_value();
  if (!compact) {
    index = dir + "/" + index::kIndexFile;
    fd = OpenFile(index, O_RDONLY | O_CLOEXEC);
  }
  if (!fd) return Err(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0 || st.st_size < 64) {
    return Err(Status::Corruption(index + ": too small for an index"));
  }
  std::vector<uint8_t> trailer(compact ? 64 : 32);
  PCRFS_RETURN_ERR_IF_ERROR(
      PreadFull(fd->get(), trailer.data(), trailer.size(),
                compact ? 0 : static_cast<uint64_t>(st.st_size) - trailer.size(), index));
  static const char kHex[] = "0123456789abcdef";
  std::string identity;
  for (uint8_t b : trailer) {
    identity += kHex[b >> 4];
    identity += kHex[b & 15];
  }
  return identity;
}

namespace {

// Removes the folders in `parent` other than `keep` that no process holds (flock on .lock):
// a rebuilt store's old bytes.
void RemoveOtherIdentities(const std::string& parent, const std::string& keep) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    if (entry.path().filename() == keep || !entry.is_directory(ec)) continue;
    auto lock = OpenFile(entry.path().string() + "/.lock", O_RDWR | O_CLOEXEC);
    if (lock && ::flock(lock->get(), LOCK_EX | LOCK_NB) != 0) continue;
    std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

Result<std::shared_ptr<RangeCache>> OpenRangeCache(const StoreLocation& location,
                                                   std::string* note) {
  RangeCacheOptions o;
  o.memory_bytes = location.options.memory_cache;
  if (location.remote && location.options.disk_cache > 0) {
    auto identity = IndexIdentity(location.dir);
    if (!identity) return Err(identity.error());
    const std::string chunks = location.dir + "/chunks";
    o.disk_dir = chunks + "/" + *identity;
    o.disk_bytes = location.options.disk_cache;
    // Folders of an earlier index (the store was rebuilt at this URL): gone, unless a mount of
    // the old store still holds one.
    RemoveOtherIdentities(chunks, *identity);
  }
  return RangeCache::Open(std::move(o), note);
}

Result<std::string> BaselineCacheDir(const StoreLocation& location, const std::string& cache_dir) {
  std::string dir = location.dir;
  if (!location.remote) {
    std::error_code ec;
    const std::string store =
        std::filesystem::absolute(location.dir, ec).lexically_normal().string();
    dir = cache_dir.empty() ? DefaultCacheDir(store)
                            : std::filesystem::absolute(cache_dir, ec).lexically_normal().string();
  }
  if (dir.empty()) {
    return Err(Status::InvalidArgument(
        location.name +
        ": no cache folder for -o form=baseline's files: HOME is unset and the password "
        "database has no home for this user; give -o cache_dir"));
  }
  auto identity = IndexIdentity(location.dir);
  if (!identity) return Err(identity.error());
  const std::string parent = dir + "/" + kBaselineCacheFolder;
  // The transcoder's version too: files re-encoded otherwise are not reused.
  const std::string name = *identity + "-" + kBaselineFormVersion;
  RemoveOtherIdentities(parent, name);
  return parent + "/" + name;
}

Result<std::unique_ptr<index::Store>> OpenStoreAt(const StoreLocation& location,
                                                  std::shared_ptr<ObjectClient> client,
                                                  std::shared_ptr<const index::IndexReader> parsed,
                                                  std::shared_ptr<RangeCache> cache) {
  index::StoreOptions options;
  options.parsed_index = parsed != nullptr ? std::move(parsed) : location.converted_index;
  if (location.remote) {
    // Opening a record checks its header and footer (80 bytes), not its tables: those cost the
    // origin bytes reads never need (pcr verify URL still checks them).
    options.check_tables = false;
    // The parsed tables' rows go to a file in the cache folder (page cache, not the daemon's
    // heap: ~120 bytes per file at level 10, 150 MB for ImageNet's 1.28M files).
    options.table_folder = location.dir;
    // The opener gets the record's path in the cache folder: its name relative to the store
    // is what follows the folder.
    options.open_record = [location, client, cache](const std::string& path,
                                                    uint64_t size) -> Result<SourceFile> {
      const std::string rel = path.substr(std::min(path.size(), location.dir.size() + 1));
      if (!client) return Err(Status::IOError(location.name + ": opened without a client", EIO));
      // The cache keeps bytes by record id: the number of the file name (index::RecordFileName).
      unsigned int id = 0;
      int used = 0;
      if (std::sscanf(rel.c_str(), "records/%u.pcr%n", &id, &used) != 1 ||
          static_cast<size_t>(used) != rel.size() || index::RecordFileName(id) != rel) {
        return Err(Status::InvalidArgument(location.name + ": not a record file name: " + rel));
      }
      auto file =
          std::make_shared<RemoteFile>(client, rel, size, cache, id, location.options.fetch_align);
      // Without a cache nothing fetched is kept: no speculation hooks.
      if (!cache) return SourceFile(std::shared_ptr<const RandomAccessFile>(std::move(file)));
      return SourceFile::Speculative(std::move(file));
    };
  }
  auto store = index::Store::Open(location.dir, std::move(options));
  if (!store && location.remote) {
    // The message names the cache folder's files: say which store they came from.
    const Status& e = store.error();
    std::string msg = location.name + ": " + e.message();
    switch (e.code()) {
      case Status::Code::kCorruption:
        return Err(Status::Corruption(std::move(msg)));
      case Status::Code::kNotSupported:
        return Err(Status::NotSupported(std::move(msg)));
      case Status::Code::kIOError:
        return Err(Status::IOError(std::move(msg), e.sys_errno()));
      default:
        return Err(Status::InvalidArgument(std::move(msg)));
    }
  }
  return store;
}

Status StartCredentialRenewal(const StoreLocation& location) {
  if (location.s3 && location.s3->aws_credentials != nullptr) {
    return location.s3->aws_credentials->StartRenewal();
  }
  return Status::OK();
}

Result<std::unique_ptr<index::Store>> OpenStoreLocation(const std::string& store,
                                                        const RemoteOptions& options,
                                                        std::shared_ptr<ObjectClient>* client_out) {
  auto loc = FetchMetadata(store, options);
  if (!loc) return Err(loc.error());
  std::shared_ptr<ObjectClient> client;
  if (loc->remote) {
    PCRFS_RETURN_ERR_IF_ERROR(StartCredentialRenewal(*loc));
    auto c = MakeObjectClient(*loc);
    if (!c) return Err(c.error());
    client = std::move(*c);
  }
  if (client_out != nullptr) *client_out = client;
  return OpenStoreAt(*loc, client);
}

}  // namespace pcrfs
