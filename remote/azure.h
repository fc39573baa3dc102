// Azure Blob Storage behind the object-client seam: the store URLs (az://CONTAINER/PREFIX,
// https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX[?SAS], and az:// with -o endpoint for
// an emulator's path-style URLs), where the account, endpoint and authority come from, the
// object and List Blobs URLs, the listing's XML, and the signers (Shared Key, SAS, anonymous).
//
// Secrets: the account key and a SAS's signature never reach a message, a log or DescribeJson.
// Every message that may hold user input passes through RedactAzureSecrets().
//
// Threads: the resolution functions and AzureProtocol are pure (AzureProtocol is immutable, so
// thread-safe). The signers are thread-safe; QueryTokenSigner reads its token file under a mutex
// (a stat at most once a second: a local file, never the network).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/secret.h"
#include "common/status.h"
#include "remote/object_client.h"
#include "remote/request_signer.h"
#include "remote/s3_config.h"  // EnvLookup
#include "remote/url.h"

namespace pcrfs {

// The x-ms-version every request carries (Azure and Azurite both accept it).
inline constexpr std::string_view kAzureApiVersion = "2021-08-06";
// Azurite's well-known development account and key (published by Microsoft).
inline constexpr std::string_view kAzuriteAccount = "devstoreaccount1";
inline constexpr std::string_view kAzuriteKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

// True if s names an Azure store: "az://..." (case-insensitive scheme) or an http(s) URL whose
// host ends with ".blob.core.windows.net" (or the China and US Government clouds' suffixes).
// Emulators' path-style URLs cannot be told from a web server's: name them az:// with
// -o endpoint.
bool IsAzureUrl(std::string_view s);

// s with the value of every sig= parameter and of AccountKey= / SharedAccessSignature= (a
// connection string's) replaced by "REDACTED" (names matched case-insensitively, a value runs
// to '&', ';', whitespace or a quote). For any text that may hold a SAS or a connection string.
std::string RedactAzureSecrets(std::string_view s);

// The options of an Azure store (the lead maps pcrfs -o / RemoteOptions onto these).
struct AzureOptions {
  std::string account;   // -o account (RemoteOptions::azure_account)
  std::string endpoint;  // -o endpoint (RemoteOptions::s3.endpoint): http://127.0.0.1:10000/ACCT
  std::string sas_file;  // -o sas_file: a file holding a SAS token, re-read when it changes
  bool no_sign = false;  // -o no_sign: anonymous requests (a public container)
};

struct AzureConfig {
  enum class Auth { kAnonymous, kSharedKey, kSas, kSasFile };

  std::string account;
  std::string container;
  std::string prefix;  // decoded blob-name prefix, no leading or trailing '/' ("" for all)
  // The blob service: https://ACCOUNT.blob.core.windows.net (path ""), or an emulator's
  // path-style http://127.0.0.1:10000/devstoreaccount1 (path "/devstoreaccount1").
  Url endpoint;
  // How Name() shows objects: az://CONTAINER/KEY (the store was named az://), else the https
  // URL without its query.
  bool az_scheme = true;

  Auth auth = Auth::kAnonymous;
  // Secrets, for the signers only: the decoded account key (kSharedKey); the SAS token without
  // '?' (kSas); the token file (kSasFile). MakeAzureAccess and pcrfs's ResolveLocation wipe key
  // and sas once the signer holds them (held once, in the signer).
  std::string key;
  std::string sas;
  std::string sas_file;
  // Where the authority and the account came from: "URL query", "option sas_file",
  // "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING",
  // "none (anonymous)", "none (no_sign)"; "URL", "option account", "AZURE_STORAGE_ACCOUNT", ...
  std::string credentials_source;
  std::string account_source;
};

// Resolves the configuration of `store` (az://CONTAINER[/PREFIX] or
// https://ACCOUNT.blob.core.windows.net/CONTAINER[/PREFIX][?SAS]):
//  account:     the https URL's host; else options.account, AZURE_STORAGE_ACCOUNT, the
//               connection string's AccountName, the endpoint's first path segment (emulators)
//               or its host (ACCOUNT.blob.core.windows.net);
//  endpoint:    the https URL's; else options.endpoint, the connection string's BlobEndpoint,
//               its DefaultEndpointsProtocol://ACCOUNT.blob.EndpointSuffix, else
//               https://ACCOUNT.blob.core.windows.net;
//  credentials: none with options.no_sign; else the URL's query (a SAS); options.sas_file;
//               AZURE_STORAGE_SAS_TOKEN; AZURE_STORAGE_KEY (base64); the connection string
//               (AZURE_STORAGE_CONNECTION_STRING: SharedAccessSignature, else AccountKey;
//               "UseDevelopmentStorage=true" is Azurite's account at 127.0.0.1:10000); else
//               anonymous.
// Errors (InvalidArgument, one line naming the URL, option or variable, never a key or a SAS):
// a malformed URL, a bad container or account name, a key that is not base64, a token that is
// not a SAS, a connection string without AccountName, a key without an account, an unreadable
// sas_file, a SAS both in the URL and in sas_file.
Result<AzureConfig> ResolveAzureConfig(std::string_view store, const AzureOptions& options,
                                       const EnvLookup& env = nullptr);

// How keys become URLs and how listings are asked for and read (object_client.h).
class AzureProtocol : public ObjectProtocol {
 public:
  explicit AzureProtocol(AzureConfig config);

  // ENDPOINT/CONTAINER/PREFIX/KEY, each '/'-separated segment URI-encoded; "" is PREFIX itself.
  std::string ObjectUrl(std::string_view key) const override;
  // az://CONTAINER/PREFIX/KEY (not encoded) or https://HOST/CONTAINER/PREFIX/KEY (encoded).
  std::string Name(std::string_view key) const override;
  // ENDPOINT/CONTAINER?restype=container&comp=list&prefix=PREFIX/[&marker=T][&maxresults=N]
  // (N capped at 5000, Azure's maximum; 0: the server's default).
  Result<std::string> ListUrl(std::string_view continuation_token,
                              uint32_t max_keys) const override;
  // An EnumerationResults page: Blob/Name (entities decoded; Encoded="true" names
  // percent-decoded), Properties/Content-Length, Properties/Last-Modified (RFC 1123),
  // NextMarker. Keys are relative to the prefix; a name outside "PREFIX/" is Corruption, the
  // prefix's own folder marker ("PREFIX/") is skipped. Corruption for anything unreadable:
  // not XML, a DOCTYPE, nesting deeper than 64, a blob without a name or size.
  Result<ObjectListing> ParseListing(std::string_view body) const override;

  const AzureConfig& config() const { return config_; }

 private:
  std::string ContainerUrl() const;
  std::string BlobName(std::string_view key) const;

  AzureConfig config_;
};

// "Sun, 06 Nov 1994 08:49:37 GMT" (x-ms-date), and back (nullopt unless exactly that form).
std::string HttpDate(std::chrono::system_clock::time_point t);
std::optional<int64_t> ParseHttpDate(std::string_view s);

// No authority: x-ms-date and x-ms-version only (a public container).
class AzureAnonymousSigner : public RequestSigner {
 public:
  Result<SignedParts> Sign(const SignableRequest& request,
                           std::chrono::system_clock::time_point now) const override;
  std::string DescribeJson() const override;
};

// Shared Key: x-ms-date, x-ms-version and "Authorization: SharedKey ACCOUNT:SIGNATURE".
class AzureSharedKeySigner : public RequestSigner {
 public:
  // key: the decoded (binary) account key. source: where it came from (DescribeJson).
  AzureSharedKeySigner(std::string account, std::string key, std::string source);
  ~AzureSharedKeySigner() override { WipeString(key_); }
  AzureSharedKeySigner(const AzureSharedKeySigner&) = delete;
  AzureSharedKeySigner& operator=(const AzureSharedKeySigner&) = delete;

  Result<SignedParts> Sign(const SignableRequest& request,
                           std::chrono::system_clock::time_point now) const override;
  std::string DescribeJson() const override;

  // The steps, public for tests against independently computed vectors. `request.headers`
  // must already hold every x-ms-* header that is sent. The canonicalized resource is
  // "/ACCOUNT" + request.path (on Azurite's path-style URLs the account appears twice) and the
  // query parameters, names lower-cased, sorted, "\nname:value" (values of one name sorted and
  // joined by ',').
  static std::string StringToSign(const SignableRequest& request, std::string_view account);
  std::string Signature(std::string_view string_to_sign) const;  // base64 HMAC-SHA256

 private:
  std::string account_;
  std::string key_;
  std::string source_;
};

// A token appended to every object URL as SignedParts::query: an Azure SAS (with Azure's
// x-ms-date and x-ms-version headers), or the query of a signed HTTP URL (a CDN token; nothing
// else added). Either a fixed token, or a file re-read when it changes (its inode, size or
// mtime; checked at most once a second of Sign's `now`, and at once on OnRefused and Reload),
// so a token rotated by another process keeps working. A file that cannot be read or holds no
// token keeps the last good one (the error shows in DescribeJson).
class QueryTokenSigner : public RequestSigner {
 public:
  enum class Flavor {
    kAzureSas,  // checked to be a SAS (sv= and sig=); Azure's headers added
    kHttpQuery  // any query string of printable characters
  };
  // A fixed SAS (without '?'); source: where it came from.
  static std::shared_ptr<QueryTokenSigner> FromToken(std::string token, std::string source);
  // Reads `path` now (the option sas_file, or for kHttpQuery query_file). Errors
  // (InvalidArgument naming the option and the path): unreadable, empty, not a SAS.
  static Result<std::shared_ptr<QueryTokenSigner>> FromFile(std::string path,
                                                            Flavor flavor = Flavor::kAzureSas);

  Result<SignedParts> Sign(const SignableRequest& request,
                           std::chrono::system_clock::time_point now) const override;
  // True when the token file holds another token than the refused try's.
  bool OnRefused(uint64_t generation, long status, std::string_view code) const override;
  void Reload() const override;
  std::string DescribeJson() const override;

  ~QueryTokenSigner() override;
  QueryTokenSigner(const QueryTokenSigner&) = delete;
  QueryTokenSigner& operator=(const QueryTokenSigner&) = delete;

 private:
  struct FileStamp {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };

  QueryTokenSigner(std::string token, std::string source, std::string path, Flavor flavor);
  // Re-reads the file if its stamp changed. REQUIRES: mu_ held.
  void CheckFileLocked() const REQUIRES(mu_);

  const std::string source_;
  const std::string path_;  // empty: a fixed token
  const Flavor flavor_;
  mutable Mutex mu_;
  mutable std::string token_ GUARDED_BY(mu_);
  mutable uint64_t generation_ GUARDED_BY(mu_) = 1;
  mutable FileStamp stamp_ GUARDED_BY(mu_);
  mutable std::chrono::system_clock::time_point last_check_ GUARDED_BY(mu_);
  mutable std::string last_error_ GUARDED_BY(mu_);
};

// Checks a SAS token (without '?'): one line, no spaces, with sv= and sig= parameters.
// `what` names its source in the error (never the token).
Status CheckSasToken(std::string_view token, std::string_view what);

// Everything a store on Azure needs: the protocol (keys and listings), the signer for the HTTP
// client (never null: anonymous access has one too) and the store's redacted name.
struct AzureAccess {
  std::unique_ptr<ObjectProtocol> protocol;
  std::shared_ptr<RequestSigner> signer;
  std::string name;
};
// The signer of a resolved configuration (the SAS file is read now: errors name it).
Result<std::shared_ptr<RequestSigner>> MakeAzureSigner(const AzureConfig& config);

Result<AzureAccess> MakeAzureAccess(std::string_view store, const AzureOptions& options,
                                    const EnvLookup& env = nullptr);

}  // namespace pcrfs
