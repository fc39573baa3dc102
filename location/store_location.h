// Where a store lives: a local folder (exactly as before) or a URL (http://, https://, s3://).
// A remote store's manifest.json and index.lmdb are downloaded into a per-store cache folder,
// each conditional on the ETag saved with it (one request each when unchanged), and the store is
// opened from that folder with record files read by ranged GETs (RemoteFile) of the size the
// index gives: no LIST, no HEAD.
//
// Two steps, because the daemon forks: FetchMetadata() before the fork (errors exit 1 in the
// foreground; its HTTP client is gone when it returns), OpenStoreAt() after it with a new client
// (curl threads do not survive fork). OpenStoreLocation() does both, for pcr.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "index/store.h"
#include "remote/aws_credential_source.h"
#include "remote/azure.h"
#include "remote/http_client.h"
#include "remote/object_client.h"
#include "remote/range_cache.h"
#include "remote/s3_config.h"
#include "remote/url.h"

namespace pcrfs {

// The options of a remote store (pcrfs -o ..., pcr's environment). None of them is a secret:
// credentials come from the environment or files.
struct RemoteOptions {
  S3Options s3;  // region, endpoint, profile, addressing, no_sign
  // Azure Blob Storage (az://CONTAINER/PREFIX): -o account (else AZURE_STORAGE_ACCOUNT); the
  // endpoint is s3.endpoint (-o endpoint: Azurite, sovereign clouds).
  std::string azure_account;
  // -o sas_file: an Azure SAS token in a file, read again when it changes (a rotating token).
  std::string sas_file;
  // -o query_file: an http(s) store's signed-URL query (a CDN token) in a file, appended to
  // every request after the URL's own query, read again when it changes.
  std::string query_file;
  std::string headers_file;  // extra "Name: value" lines for every request (a bearer token)
  std::string ca_file;       // a PEM bundle instead of the system's
  std::string cache_dir;     // empty: DefaultCacheDir(url)
  std::chrono::milliseconds timeout{30000};  // per request, all retries included
  int connections = 16;                      // per host
  // The daemon's cache of fetched record bytes (remote/range_cache.h): memory, and disk under
  // cache_dir/chunks/<index identity> (0: none); disk_cache_fill: fetch the mounted level of
  // every record into it in the background at mount.
  uint64_t memory_cache = uint64_t{256} << 20;
  uint64_t disk_cache = 0;
  bool disk_cache_fill = false;
  // -o fetch_align: every ranged GET of a record widened to multiples of this (0: exact ranges),
  // a cache tier's slice (docs/cache-tier.md), so that no two of a mount's GETs share a slice.
  uint64_t fetch_align = 0;
};

struct StoreLocation;

// Makes the object client of a remote location. Tests pass one that hands out a
// MemoryObjectClient or a FaultyObjectClient (remote/fake_object_client.h), so everything above
// the client (the metadata's download and revalidation, RemoteFile, the range cache, the
// Filesystem) runs as the daemon runs it, without a socket (fs/remote_filesystem_test.cc).
using ObjectClientFactory =
    std::function<Result<std::shared_ptr<ObjectClient>>(const StoreLocation&)>;

struct StoreLocation {
  std::string name;  // what to show: the local path, or the redacted URL
  bool remote = false;
  std::string dir;  // the folder Store::Open reads: the local store, or the cache folder
  // Remote only.
  Url url;
  std::optional<S3Config> s3;
  // S3's credentials (nullptr: anonymous), resolved before the daemon forks.
  std::shared_ptr<const AwsCredentialSource> aws_credentials;
  std::optional<AzureConfig> azure;  // az:// and https://ACCOUNT.blob.core.windows.net
  // What authorizes every request (S3: SigV4 over aws_credentials; Azure: Shared Key, SAS or
  // anonymous; nullptr: nothing). Holds no thread: made before the fork, shared after.
  std::shared_ptr<const RequestSigner> signer;
  RemoteOptions options;
  // The index as FetchMetadata checked it (parsed from the cache folder's index.pcri, or an
  // older store's index as converted into it): OpenStoreAt uses it instead of parsing index.pcri
  // again (nullptr: none).
  std::shared_ptr<const index::IndexReader> converted_index;
  // What MakeObjectClient calls (FetchMetadata's factory); nullptr: the real clients.
  ObjectClientFactory client_factory;
};

// The cache folder of a store URL when -o cache_dir is not given:
// /var/cache/pcrfs/<sha256 of the redacted URL> for root, else $XDG_CACHE_HOME/pcrfs/<...> or
// ~/.cache/pcrfs/<...> (HOME, else the password database's home; "" when neither is known:
// never a folder in /tmp). The folder is made 0700 (MakePrivateDir).
std::string DefaultCacheDir(const std::string& redacted_url, const EnvLookup& env = nullptr);

// The warning ResolveLocation logs when a remote location's requests carry credentials (a
// signer: SigV4 with its session token, Shared Key, a SAS or query token; a signed URL's query;
// a header file) over plain http to a host that is not this machine's loopback: anyone on the
// path can read or replay them. "" when there is nothing to warn about.
std::string PlainHttpCredentialsWarning(const StoreLocation& location);

// The client options a location's requests need (signer, headers, TLS, timeout, connections).
HttpClientOptions ClientOptionsFor(const StoreLocation& location);

// A new object client for a remote location (its own HTTP client: create it after a fork), or
// what location.client_factory makes. Errors: the HTTP client's (an unreadable headers file).
Result<std::shared_ptr<ObjectClient>> MakeObjectClient(const StoreLocation& location);

// A store or source URL's location without any request: the URL parsed, S3's configuration
// and credentials resolved, option paths made absolute (dir is left as the URL). A local path
// gives {name = dir = store}. Errors: FetchMetadata's, before any request.
Result<StoreLocation> ResolveLocation(const std::string& store, const RemoteOptions& options,
                                      const EnvLookup& env = nullptr);

// Step 1. A local path: checks nothing, returns {dir = store}. A URL: parses it, resolves S3's
// configuration, creates the cache folder and downloads manifest.json and index.lmdb into it
// (conditional on their saved ETags; written atomically and synced), then checks them as
// Store::Open does. Copies in the folder that fail that check (Corruption) are removed with
// their ETags and fetched once more, unconditionally; what fails again is removed too, never
// kept for the next mount. Errors are one line naming the
// redacted URL: "not a pcrfs store (no manifest.json)" for a 404 manifest, the client's
// errors otherwise (403 with the S3 code, connection refused, ...).
// client_factory (nullptr: the real clients) makes this call's client and, kept in the
// location, every client MakeObjectClient makes for it.
Result<StoreLocation> FetchMetadata(const std::string& store, const RemoteOptions& options,
                                    const EnvLookup& env = nullptr,
                                    ObjectClientFactory client_factory = nullptr);

// Step 2. Opens the store at the location: local exactly as index::Store::Open; remote from the
// cache folder, record files as RemoteFiles over `client` (which the store keeps alive; nullptr
// to check the metadata only: then opening a record fails).
// parsed_index: the index as an earlier open of this location in this process parsed and
// checked it (Store::shared_index(); the daemon's check before its fork): not read again.
// cache: keeps what is fetched (OpenRangeCache; nullptr: nothing kept, each read one GET).
Result<std::unique_ptr<index::Store>> OpenStoreAt(
    const StoreLocation& location, std::shared_ptr<ObjectClient> client,
    std::shared_ptr<const index::IndexReader> parsed_index = nullptr,
    std::shared_ptr<RangeCache> cache = nullptr);

// The cache of fetched record bytes for a remote location's daemon: memory_cache bytes in
// memory and, with disk_cache > 0, the folder <dir>/chunks/<identity of the index> (the hex of
// index.lmdb's trailer, which holds the index's size and CRC: a rebuilt store gets a new
// folder); folders of other identities that no process holds are removed. *note: a line to log
// (the disk folder is in use by another mount). Errors: the folder cannot be created.
Result<std::shared_ptr<RangeCache>> OpenRangeCache(const StoreLocation& location,
                                                   std::string* note);

// The identity of the index in store or cache folder `dir`: the hex of index.pcri's header
// (index.lmdb's trailer), which changes when the store is rebuilt. Errors: no index there.
Result<std::string> IndexIdentity(const std::string& dir);

// -o form=baseline's disk folder (fs/baseline_disk_cache.h): <cache folder>/baseline/
// <IndexIdentity>-<kBaselineFormVersion>, the cache folder being a remote store's, or for a
// local store `cache_dir` (-o cache_dir, made absolute), else DefaultCacheDir(the store's absolute
// path). Folders of other identities that no process holds are removed. Errors:
// IndexIdentity's.
inline constexpr char kBaselineCacheFolder[] = "baseline";
inline constexpr char kBaselineFormVersion[] = "v1";  // bump when ToBaseline's bytes change
Result<std::string> BaselineCacheDir(const StoreLocation& location, const std::string& cache_dir);

// Starts renewing the location's temporary credentials in the background (a thread: call it
// in the process that reads, after any fork). Nothing to do for other locations.
Status StartCredentialRenewal(const StoreLocation& location);

// Both steps with a new client (nullptr for a local store); `client` (if given) receives it.
Result<std::unique_ptr<index::Store>> OpenStoreLocation(
    const std::string& store, const RemoteOptions& options,
    std::shared_ptr<ObjectClient>* client = nullptr);

}  // namespace pcrfs
