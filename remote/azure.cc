#include "remote/azure.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "remote/http_client.h"
#include "remote/sigv4.h"
#include "remote/xml.h"

namespace pcrfs {
namespace {

// Host suffixes of Azure's blob service: the public cloud, China and US Government.
constexpr std::string_view kBlobHostSuffixes[] = {
    ".blob.core.windows.net", ".blob.core.chinacloudapi.cn", ".blob.core.usgovcloudapi.net"};
constexpr uint32_t kMaxListResults = 5000;  // List Blobs' maxresults cap
constexpr size_t kMaxSasFileBytes = 64 * 1024;

char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(s[i]) != Lower(prefix[i])) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

constexpr char kBase64Chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kBase64Chars[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kBase64Chars[(v >> 18) & 63];
    out += kBase64Chars[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kBase64Chars[(v >> 18) & 63];
    out += kBase64Chars[(v >> 12) & 63];
    out += kBase64Chars[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// Strict standard base64 with padding; nullopt for anything else (or nothing).
std::optional<std::string> Base64Decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    const char* p = std::strchr(kBase64Chars, c);
    return c != '\0' && p != nullptr ? static_cast<int>(p - kBase64Chars) : -1;
  };
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int pad = 0;
    if (last && in[i + 3] == '=') pad = in[i + 2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      int d = k >= 4 - pad ? 0 : value(in[i + k]);
      if (d < 0) return std::nullopt;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xFF);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return out;
}

// Container names: 3-63 characters, lower-case letters, digits and hyphens, starting and ending
// with a letter or digit, no two hyphens in a row.
bool ValidContainer(std::string_view c) {
  if (c.size() < 3 || c.size() > 63) return false;
  for (size_t i = 0; i < c.size(); ++i) {
    const char ch = c[i];
    const bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
    if (alnum) continue;
    if (ch != '-' || i == 0 || i + 1 == c.size() || c[i + 1] == '-') return false;
  }
  return true;
}

// Account names: 3-24 lower-case letters and digits.
bool ValidAccount(std::string_view a) {
  if (a.size() < 3 || a.size() > 24) return false;
  return std::all_of(a.begin(), a.end(),
                     [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); });
}

// A store URL taken apart (both forms).
struct StoreParts {
  bool az_scheme = true;
  std::string container;
  std::string prefix;  // decoded
  // The https form only.
  std::string account;
  Url endpoint;
  std::string query;
};

// Checks and normalizes a decoded blob-name prefix: no leading or trailing '/', no empty, "."
// or ".." segment.
Status CheckPrefix(std::string* prefix, const std::string& shown) {
  while (!prefix->empty() && prefix->back() == '/') prefix->pop_back();
  if (prefix->empty()) return Status::OK();
  size_t start = 0;
  while (true) {
    size_t slash = prefix->find('/', start);
    std::string_view seg = std::string_view(*prefix).substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") {
      return Status::InvalidArgument(shown + ": empty, '.' or '..' path segment");
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return Status::OK();
}

Status CheckContainer(const std::string& container, const std::string& shown) {
  if (!ValidContainer(container)) {
    return Status::InvalidArgument(RedactAzureSecrets(
        shown + ": '" + container +
        "' is not a valid container name (3-63 lower-case letters, digits and single hyphens)"));
  }
  return Status::OK();
}

Result<StoreParts> ParseAzScheme(std::string_view s, const std::string& shown) {
  std::string_view rest = s.substr(5);  // after "az://"
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return Err(Status::InvalidArgument(
        shown +
        ": az:// URLs take no query or fragment (a SAS goes in AZURE_STORAGE_SAS_TOKEN "
        "or -o sas_file, or use the https:// URL)"));
  }
  StoreParts p;
  size_t slash = rest.find('/');
  p.container = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) p.prefix = std::string(rest.substr(slash + 1));
  PCRFS_RETURN_ERR_IF_ERROR(CheckContainer(p.container, shown));
  PCRFS_RETURN_ERR_IF_ERROR(CheckPrefix(&p.prefix, shown));
  return p;
}

Result<StoreParts> ParseBlobUrl(std::string_view s, const std::string& shown) {
  StoreParts p;
  p.az_scheme = false;
  const bool https = StartsWithNoCase(s, "https://");
  std::string_view rest = s.substr(https ? 8 : 7);
  if (size_t hash = rest.find('#'); hash != std::string_view::npos) {
    return Err(Status::InvalidArgument(shown + ": a URL fragment is not allowed"));
  }
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    p.query = std::string(rest.substr(q + 1));
    rest = rest.substr(0, q);
  }
  size_t slash = rest.find('/');
  std::string authority = ToLower(rest.substr(0, slash));
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (authority.find('@') != std::string::npos) {
    return Err(Status::InvalidArgument(
        shown + ": user info in a URL is not allowed (credentials go in the environment)"));
  }
  std::string host = authority;
  uint16_t port = https ? 443 : 80;
  if (size_t colon = authority.find(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    std::string digits = authority.substr(colon + 1);
    if (digits.empty() || digits.size() > 5 ||
        digits.find_first_not_of("0123456789") != std::string::npos || std::stoul(digits) == 0 ||
        std::stoul(digits) > 65535) {
      return Err(Status::InvalidArgument(shown + ": bad port"));
    }
    port = static_cast<uint16_t>(std::stoul(digits));
  }
  std::string_view suffix;
  for (std::string_view sfx : kBlobHostSuffixes) {
    if (EndsWith(host, sfx)) suffix = sfx;
  }
  if (suffix.empty()) {
    return Err(Status::InvalidArgument(shown + ": not an Azure blob service host"));
  }
  p.account = host.substr(0, host.size() - suffix.size());
  if (!ValidAccount(p.account)) {
    return Err(Status::InvalidArgument(RedactAzureSecrets(
        shown + ": '" + p.account +
        "' is not a valid storage account name (3-24 lower-case letters and digits)")));
  }
  p.endpoint.scheme = https ? Url::Scheme::kHttps : Url::Scheme::kHttp;
  p.endpoint.host = host;
  p.endpoint.port = port;
  p.endpoint.path = "";
  auto decoded = PercentDecode(path);
  if (!decoded.has_value()) {
    return Err(Status::InvalidArgument(shown + ": bad %-escape in the path"));
  }
  size_t cslash = decoded->find('/');
  p.container = decoded->substr(0, cslash);
  if (cslash != std::string::npos) p.prefix = decoded->substr(cslash + 1);
  PCRFS_RETURN_ERR_IF_ERROR(CheckContainer(p.container, shown));
  PCRFS_RETURN_ERR_IF_ERROR(CheckPrefix(&p.prefix, shown));
  return p;
}

// AZURE_STORAGE_CONNECTION_STRING: "Name=value;..." (names case-insensitive, as the SDKs
// read them). Values may hold '=' (base64, a SAS).
struct ConnectionString {
  std::map<std::string, std::string> values;  // lower-case names
  std::string Get(const char* lower_name) const {
    auto it = values.find(lower_name);
    return it == values.end() ? "" : it->second;
  }
};

constexpr char kConnectionStringVar[] = "AZURE_STORAGE_CONNECTION_STRING";

Result<std::optional<ConnectionString>> ParseConnectionString(const char* text) {
  if (text == nullptr || *text == '\0') return std::optional<ConnectionString>();
  ConnectionString cs;
  std::string_view s(text);
  size_t start = 0;
  while (start <= s.size()) {
    size_t semi = s.find(';', start);
    std::string part =
        Trim(s.substr(start, semi == std::string_view::npos ? s.npos : semi - start));
    if (!part.empty()) {
      size_t eq = part.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Err(Status::InvalidArgument(std::string(kConnectionStringVar) +
                                           ": a part without Name= (expected Name=value;...)"));
      }
      cs.values[ToLower(Trim(part.substr(0, eq)))] = Trim(part.substr(eq + 1));
    }
    if (semi == std::string_view::npos) break;
    start = semi + 1;
  }
  if (ToLower(cs.Get("usedevelopmentstorage")) == "true") {
    // Azurite's (and the old emulator's) account at its default address.
    cs.values["accountname"] = std::string(kAzuriteAccount);
    cs.values["accountkey"] = std::string(kAzuriteKey);
    if (cs.Get("blobendpoint").empty()) {
      cs.values["blobendpoint"] = "http://127.0.0.1:10000/" + std::string(kAzuriteAccount);
    }
  }
  return std::optional<ConnectionString>(std::move(cs));
}

std::string EnvGet(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? "" : std::string(v);
}

Result<Url> ParseEndpoint(const std::string& value, const std::string& source) {
  auto ep = ParseUrl(value);
  if (!ep.has_value() || ep->is_s3()) {
    return Err(Status::InvalidArgument(
        source + ": " + RedactAzureSecrets(RedactUrl(value)) + " is not a valid http(s) endpoint" +
        (ep.has_value() ? "" : " (" + RedactAzureSecrets(ep.error().message()) + ")")));
  }
  return *ep;
}

// The raw (encoded) value of query parameter `name` in an encoded query string; nullopt when
// absent ("name" alone is an empty value).
std::optional<std::string_view> FindQueryParam(std::string_view query, std::string_view name) {
  size_t start = 0;
  while (start <= query.size()) {
    const size_t amp = query.find('&', start);
    const std::string_view part =
        query.substr(start, amp == std::string_view::npos ? query.npos : amp - start);
    const size_t eq = part.find('=');
    if (part.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    }
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  return std::nullopt;
}

// The value of query parameter `name` (decoded, '+' as a space) or "".
std::string QueryParam(std::string_view query, std::string_view name) {
  auto raw = FindQueryParam(query, name);
  if (!raw) return "";
  std::string text(*raw);
  std::replace(text.begin(), text.end(), '+', ' ');
  return PercentDecode(text).value_or("");
}

bool HasQueryParam(std::string_view query, std::string_view name) {
  auto raw = FindQueryParam(query, name);
  return raw && !raw->empty();
}

// A token as users paste it: surrounding whitespace and a leading '?' dropped.
std::string CleanToken(std::string_view raw) {
  std::string t = Trim(raw);
  if (!t.empty() && t[0] == '?') t.erase(0, 1);
  return t;
}

struct SasFileRead {
  std::string token;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
};

// Reads a SAS token file; the stamp is the opened file's (fstat), so a rename between the stat
// and the read cannot pair a new token with an old stamp.
Result<SasFileRead> ReadSasFile(const std::string& path, QueryTokenSigner::Flavor flavor) {
  const bool sas = flavor == QueryTokenSigner::Flavor::kAzureSas;
  const std::string what = std::string(sas ? "option sas_file " : "option query_file ") + path;
  auto fd = OpenFile(path, O_RDONLY);
  if (!fd.has_value()) return Err(Status::InvalidArgument(what + ": " + fd.error().message()));
  WarnIfReadableByOthers(path, sas ? "option sas_file" : "option query_file");
  struct stat st;
  if (fstat(fd->get(), &st) != 0) {
    return Err(Status::InvalidArgument(Status::FromErrno(what, errno).message()));
  }
  auto bytes = ReadWholeFd(fd->get(), kMaxSasFileBytes, what);
  if (!bytes.has_value()) return Err(Status::InvalidArgument(bytes.error().message()));
  SasFileRead r;
  r.token = CleanToken(std::string(bytes->begin(), bytes->end()));
  if (sas) {
    PCRFS_RETURN_ERR_IF_ERROR(CheckSasToken(r.token, what));
  } else if (r.token.empty() || !std::all_of(r.token.begin(), r.token.end(), [](char c) {
               return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7F;
             })) {
    return Err(Status::InvalidArgument(what + ": not a query string (one line of printable "
                                              "characters, e.g. Expires=...&Signature=...)"));
  }
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  r.size = st.st_size;
  r.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return r;
}

constexpr const char* kWeekdays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// ----------------------------------------------------------------------------- XML

bool ParseUint64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

std::string HeaderValue(const HeaderList& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (k.size() == name.size() && StartsWithNoCase(k, name)) return v;
  }
  return "";
}

HeaderList DateAndVersion(std::chrono::system_clock::time_point now) {
  return {{"x-ms-date", HttpDate(now)}, {"x-ms-version", std::string(kAzureApiVersion)}};
}

}  // namespace

// ----------------------------------------------------------------------------- URLs, secrets

bool IsAzureUrl(std::string_view s) {
  if (StartsWithNoCase(s, "az://")) return true;
  std::string_view rest;
  if (StartsWithNoCase(s, "https://")) {
    rest = s.substr(8);
  } else if (StartsWithNoCase(s, "http://")) {
    rest = s.substr(7);
  } else {
    return false;
  }
  std::string host = ToLower(rest.substr(0, rest.find_first_of("/?#")));
  if (size_t at = host.rfind('@'); at != std::string::npos) host.erase(0, at + 1);
  if (size_t colon = host.find(':'); colon != std::string::npos) host.resize(colon);
  for (std::string_view sfx : kBlobHostSuffixes) {
    if (host.size() > sfx.size() && EndsWith(host, sfx)) return true;
  }
  return false;
}

std::string RedactAzureSecrets(std::string_view s) {
  struct Secret {
    std::string_view name;  // lower case, with '='
    std::string_view stops;
  };
  // A connection string's SAS runs to ';' (it holds '&'); the others end at '&' too.
  static constexpr Secret kSecrets[] = {{"sharedaccesssignature=", ";\"'<> \t\r\n"},
                                        {"accountkey=", ";&\"'<> \t\r\n"},
                                        {"sig=", ";&\"'<> \t\r\n"}};
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    bool matched = false;
    const bool boundary = i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1]));
    if (boundary) {
      for (const Secret& secret : kSecrets) {
        if (!StartsWithNoCase(s.substr(i), secret.name)) continue;
        out.append(s.substr(i, secret.name.size()));
        i += secret.name.size();
        size_t end = s.find_first_of(secret.stops, i);
        if (end == std::string_view::npos) end = s.size();
        if (end > i) out += "REDACTED";
        i = end;
        matched = true;
        break;
      }
    }
    if (!matched) out += s[i++];
  }
  return out;
}

Status CheckSasToken(std::string_view token, std::string_view what) {
  const bool printable = std::all_of(token.begin(), token.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7F;
  });
  if (token.empty() || !printable || !HasQueryParam(token, "sv") || !HasQueryParam(token, "sig")) {
    return Status::InvalidArgument(std::string(what) +
                                   ": not a SAS token (a query string with sv= and sig=)");
  }
  return Status::OK();
}

// ----------------------------------------------------------------------------- configuration

namespace {

// The endpoint when one is given explicitly: the URL's, -o endpoint, or the connection
// string's BlobEndpoint (its path may name the account).
Status ExplicitEndpoint(const StoreParts& parts, const AzureOptions& options,
                        const std::optional<ConnectionString>& cs, const std::string& shown,
                        std::optional<Url>* endpoint) {
  if (!parts.az_scheme) {
    *endpoint = parts.endpoint;
    if (!options.endpoint.empty()) {
      return Status::InvalidArgument(shown + ": -o endpoint is for az:// URLs only");
    }
  } else if (!options.endpoint.empty()) {
    auto ep = ParseEndpoint(options.endpoint, "option endpoint");
    if (!ep.has_value()) return ep.error();
    *endpoint = *ep;
  } else if (cs.has_value() && !cs->Get("blobendpoint").empty()) {
    auto ep =
        ParseEndpoint(cs->Get("blobendpoint"), std::string(kConnectionStringVar) + " BlobEndpoint");
    if (!ep.has_value()) return ep.error();
    *endpoint = *ep;
  }
  return Status::OK();
}

// The storage account: the URL's, else -o account, AZURE_STORAGE_ACCOUNT, the connection
// string's AccountName, the endpoint's path or host; checked for a valid name.
Status ChooseAccount(const StoreParts& parts, const AzureOptions& options, const EnvLookup& env,
                     const std::optional<ConnectionString>& cs, const std::optional<Url>& endpoint,
                     const std::string& shown, AzureConfig* c) {
  const std::string cs_account = cs.has_value() ? cs->Get("accountname") : "";
  if (!parts.az_scheme) {
    c->account = parts.account;
    c->account_source = "URL";
    if (!options.account.empty() && options.account != c->account) {
      return Status::InvalidArgument("option account '" + options.account +
                                     "' is not the URL's account '" + c->account + "'");
    }
  } else if (!options.account.empty()) {
    c->account = options.account;
    c->account_source = "option account";
  } else if (!EnvGet(env, "AZURE_STORAGE_ACCOUNT").empty()) {
    c->account = EnvGet(env, "AZURE_STORAGE_ACCOUNT");
    c->account_source = "AZURE_STORAGE_ACCOUNT";
  } else if (!cs_account.empty()) {
    c->account = cs_account;
    c->account_source = std::string(kConnectionStringVar) + " AccountName";
  } else if (endpoint.has_value() && endpoint->path.size() > 1) {
    c->account = endpoint->path.substr(1, endpoint->path.find('/', 1) - 1);
    c->account_source = "endpoint path";
  } else if (std::string host = endpoint.has_value() ? endpoint->host : "";
             IsAzureUrl("https://" + host)) {
    c->account = host.substr(0, host.find('.'));
    c->account_source = "endpoint host";
  } else {
    return Status::InvalidArgument(
        shown +
        ": no storage account (-o account=NAME, AZURE_STORAGE_ACCOUNT or "
        "AZURE_STORAGE_CONNECTION_STRING)");
  }
  if (!ValidAccount(c->account)) {
    return Status::InvalidArgument(
        c->account_source + ": '" + RedactAzureSecrets(c->account) +
        "' is not a valid storage account name (3-24 lower-case letters and digits)");
  }
  return Status::OK();
}

// The endpoint: the explicit one, else the account's own, in the connection string's cloud
// when it names one.
Status ChooseEndpoint(const std::optional<Url>& endpoint, const std::optional<ConnectionString>& cs,
                      AzureConfig* c) {
  if (endpoint.has_value()) {
    c->endpoint = *endpoint;
  } else {
    // The account's own endpoint, in the connection string's cloud when it names one.
    std::string protocol = cs.has_value() ? ToLower(cs->Get("defaultendpointsprotocol")) : "";
    std::string suffix = cs.has_value() ? cs->Get("endpointsuffix") : "";
    if (protocol.empty()) protocol = "https";
    if (suffix.empty()) suffix = "core.windows.net";
    if (protocol != "https" && protocol != "http") {
      return Status::InvalidArgument(std::string(kConnectionStringVar) +
                                     ": DefaultEndpointsProtocol must be https or http");
    }
    auto ep = ParseEndpoint(protocol + "://" + c->account + ".blob." + suffix,
                            std::string(kConnectionStringVar) + " EndpointSuffix");
    if (!ep.has_value()) return ep.error();
    c->endpoint = *ep;
  }
  return Status::OK();
}

// The authority, first found wins: -o no_sign, a SAS in the URL, -o sas_file,
// AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY, the connection string's SAS or key; else
// anonymous.
Status ChooseAuthority(const StoreParts& parts, const AzureOptions& options, const EnvLookup& env,
                       const std::optional<ConnectionString>& cs, const std::string& shown,
                       AzureConfig* c) {
  if (options.no_sign) {
    if (!parts.query.empty()) {
      return Status::InvalidArgument(shown + ": -o no_sign with a SAS in the URL");
    }
    c->auth = AzureConfig::Auth::kAnonymous;
    c->credentials_source = "none (no_sign)";
    return Status::OK();
  }
  if (!parts.query.empty()) {
    if (!options.sas_file.empty()) {
      return Status::InvalidArgument(shown +
                                     ": a SAS in the URL and -o sas_file: give one of them");
    }
    c->sas = CleanToken(parts.query);
    PCRFS_RETURN_IF_ERROR(CheckSasToken(c->sas, shown + " (its query)"));
    c->auth = AzureConfig::Auth::kSas;
    c->credentials_source = "URL query";
    return Status::OK();
  }
  if (!options.sas_file.empty()) {
    auto read = ReadSasFile(options.sas_file, QueryTokenSigner::Flavor::kAzureSas);
    if (!read.has_value()) return read.error();
    c->sas_file = options.sas_file;
    c->auth = AzureConfig::Auth::kSasFile;
    c->credentials_source = "option sas_file";
    return Status::OK();
  }
  if (std::string sas = CleanToken(EnvGet(env, "AZURE_STORAGE_SAS_TOKEN")); !sas.empty()) {
    PCRFS_RETURN_IF_ERROR(CheckSasToken(sas, "AZURE_STORAGE_SAS_TOKEN"));
    c->sas = std::move(sas);
    c->auth = AzureConfig::Auth::kSas;
    c->credentials_source = "AZURE_STORAGE_SAS_TOKEN";
    return Status::OK();
  }
  if (std::string key = Trim(EnvGet(env, "AZURE_STORAGE_KEY")); !key.empty()) {
    auto decoded = Base64Decode(key);
    if (!decoded.has_value()) {
      return Status::InvalidArgument("AZURE_STORAGE_KEY is not valid base64");
    }
    c->key = std::move(*decoded);
    c->auth = AzureConfig::Auth::kSharedKey;
    c->credentials_source = "AZURE_STORAGE_KEY";
    return Status::OK();
  }
  if (cs.has_value()) {
    const std::string var = kConnectionStringVar;
    const std::string cs_account = cs->Get("accountname");
    if (std::string sas = CleanToken(cs->Get("sharedaccesssignature")); !sas.empty()) {
      PCRFS_RETURN_IF_ERROR(CheckSasToken(sas, var + " SharedAccessSignature"));
      c->sas = std::move(sas);
      c->auth = AzureConfig::Auth::kSas;
      c->credentials_source = var;
      return Status::OK();
    }
    if (std::string key = cs->Get("accountkey"); !key.empty()) {
      if (cs_account.empty()) {
        return Status::InvalidArgument(var + ": AccountKey without AccountName");
      }
      if (cs_account != c->account) {
        return Status::InvalidArgument(var + ": its AccountName '" +
                                       RedactAzureSecrets(cs_account) +
                                       "' is not the store's account '" + c->account + "'");
      }
      auto decoded = Base64Decode(key);
      if (!decoded.has_value()) {
        return Status::InvalidArgument(var + ": AccountKey is not valid base64");
      }
      c->key = std::move(*decoded);
      c->auth = AzureConfig::Auth::kSharedKey;
      c->credentials_source = var;
      return Status::OK();
    }
  }
  c->auth = AzureConfig::Auth::kAnonymous;
  c->credentials_source = "none (anonymous)";
  return Status::OK();
}

}  // namespace

Result<AzureConfig> ResolveAzureConfig(std::string_view store, const AzureOptions& options,
                                       const EnvLookup& env_in) {
  EnvLookup env = env_in ? env_in : EnvLookup([](const char* n) { return std::getenv(n); });
  const std::string shown = RedactAzureSecrets(RedactUrl(store));
  if (!IsAzureUrl(store)) {
    return Err(Status::InvalidArgument(shown +
                                       ": not an Azure Blob Storage URL (az://CONTAINER/"
                                       "PATH or https://ACCOUNT.blob.core.windows.net/...)"));
  }
  auto parts =
      StartsWithNoCase(store, "az://") ? ParseAzScheme(store, shown) : ParseBlobUrl(store, shown);
  if (!parts.has_value()) return Err(parts.error());
  auto cs_or = ParseConnectionString(env(kConnectionStringVar));
  if (!cs_or.has_value()) return Err(cs_or.error());
  const std::optional<ConnectionString>& cs = *cs_or;

  AzureConfig c;
  c.az_scheme = parts->az_scheme;
  c.container = parts->container;
  c.prefix = parts->prefix;

  std::optional<Url> endpoint;
  PCRFS_RETURN_ERR_IF_ERROR(ExplicitEndpoint(*parts, options, cs, shown, &endpoint));
  PCRFS_RETURN_ERR_IF_ERROR(ChooseAccount(*parts, options, env, cs, endpoint, shown, &c));
  PCRFS_RETURN_ERR_IF_ERROR(ChooseEndpoint(endpoint, cs, &c));
  PCRFS_RETURN_ERR_IF_ERROR(ChooseAuthority(*parts, options, env, cs, shown, &c));
  return c;
}

// ----------------------------------------------------------------------------- protocol

AzureProtocol::AzureProtocol(AzureConfig config) : config_(std::move(config)) {}

std::string AzureProtocol::BlobName(std::string_view key) const {
  if (config_.prefix.empty()) return std::string(key);
  if (key.empty()) return config_.prefix;
  return config_.prefix + "/" + std::string(key);
}

std::string AzureProtocol::ContainerUrl() const {
  const Url& ep = config_.endpoint;
  return (ep.scheme == Url::Scheme::kHttps ? "https://" : "http://") + ep.Authority() + ep.path +
         "/" + config_.container;
}

std::string AzureProtocol::ObjectUrl(std::string_view key) const {
  std::string blob = BlobName(key);
  if (blob.empty()) return ContainerUrl();
  return ContainerUrl() + "/" + UriEncode(blob, /*keep_slash=*/true);
}

std::string AzureProtocol::Name(std::string_view key) const {
  if (!config_.az_scheme) return ObjectUrl(key);
  std::string blob = BlobName(key);
  return "az://" + config_.container + (blob.empty() ? "" : "/" + blob);
}

Result<std::string> AzureProtocol::ListUrl(std::string_view continuation_token,
                                           uint32_t max_keys) const {
  std::string url = ContainerUrl() + "?restype=container&comp=list";
  if (!config_.prefix.empty()) url += "&prefix=" + UriEncode(config_.prefix + "/", false);
  if (!continuation_token.empty()) url += "&marker=" + UriEncode(continuation_token, false);
  if (max_keys > 0) url += "&maxresults=" + std::to_string(std::min(max_keys, kMaxListResults));
  return url;
}

Result<ObjectListing> AzureProtocol::ParseListing(std::string_view body) const {
  const std::string where = "listing of " + Name("");
  auto bad = [&](const std::string& what) { return Err(Status::Corruption(where + ": " + what)); };
  auto root = ParseXml(body);
  if (!root.has_value()) return bad(root.error().message());
  if (root->name != "EnumerationResults") {
    return bad("not an EnumerationResults document (<" + ServerText(root->name, 64) + ">)");
  }
  ObjectListing listing;
  const std::string prefix = config_.prefix.empty() ? "" : config_.prefix + "/";
  if (const XmlNode* blobs = root->Child("Blobs"); blobs != nullptr) {
    for (const XmlNode& blob : blobs->children) {
      if (blob.name != "Blob") continue;  // BlobPrefix (only with a delimiter, never asked)
      const XmlNode* name_el = blob.Child("Name");
      if (name_el == nullptr || name_el->text.empty()) return bad("a Blob without a Name");
      std::string name = name_el->text;
      if (name_el->Attribute("Encoded") == "true") {
        auto decoded = PercentDecode(name);
        if (!decoded.has_value()) return bad("a bad %-escape in an encoded blob name");
        name = std::move(*decoded);
      }
      const XmlNode* props = blob.Child("Properties");
      const XmlNode* length = props == nullptr ? nullptr : props->Child("Content-Length");
      ObjectListing::Entry entry;
      if (length == nullptr || !ParseUint64(Trim(length->text), &entry.size)) {
        return bad("blob '" + ServerText(name, 200) + "' has no valid Properties/Content-Length");
      }
      if (const XmlNode* lm = props->Child("Last-Modified"); lm != nullptr) {
        auto t = ParseHttpDate(Trim(lm->text));
        if (!t.has_value())
          return bad("blob '" + ServerText(name, 200) + "' has a bad Last-Modified");
        entry.mtime_sec = *t;
      }
      if (name.compare(0, prefix.size(), prefix) != 0) {
        return bad("blob '" + ServerText(name, 200) + "' is outside the prefix '" + prefix + "'");
      }
      entry.key = name.substr(prefix.size());
      if (entry.key.empty()) continue;  // the prefix's own folder marker
      listing.entries.push_back(std::move(entry));
    }
  }
  if (const XmlNode* next = root->Child("NextMarker"); next != nullptr) {
    listing.next_token = Trim(next->text);
  }
  return listing;
}

// ----------------------------------------------------------------------------- dates

std::string HttpDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s, %02d %s %04d %02d:%02d:%02d GMT", kWeekdays[tm.tm_wday],
                tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  return buf;
}

std::optional<int64_t> ParseHttpDate(std::string_view s) {
  // "Sun, 06 Nov 1994 08:49:37 GMT"
  if (s.size() != 29 || s.substr(3, 2) != ", " || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
      s[19] != ':' || s[22] != ':' || s.substr(25) != " GMT") {
    return std::nullopt;
  }
  auto num = [&](size_t pos, size_t n) -> int {
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return -1;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  int month = -1;
  for (int m = 0; m < 12; ++m) {
    if (s.substr(8, 3) == kMonths[m]) month = m + 1;
  }
  const int day = num(5, 2), year = num(12, 4), hh = num(17, 2), mm = num(20, 2), ss = num(23, 2);
  if (month < 0 || day < 1 || day > 31 || year < 0 || hh < 0 || hh > 23 || mm < 0 || mm > 59 ||
      ss < 0 || ss > 60) {
    return std::nullopt;
  }
  return DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 +
         hh * 3600 + mm * 60 + ss;
}

// ----------------------------------------------------------------------------- signers

Result<SignedParts> AzureAnonymousSigner::Sign(const SignableRequest& /*request*/,
                                               std::chrono::system_clock::time_point now) const {
  SignedParts parts;
  parts.headers = DateAndVersion(now);
  return parts;
}

std::string AzureAnonymousSigner::DescribeJson() const { return R"({"source":"none"})"; }

AzureSharedKeySigner::AzureSharedKeySigner(std::string account, std::string key, std::string source)
    : account_(std::move(account)), key_(std::move(key)), source_(std::move(source)) {}

std::string AzureSharedKeySigner::StringToSign(const SignableRequest& request,
                                               std::string_view account) {
  std::string sts = request.method;
  for (const char* h :
       {"Content-Encoding", "Content-Language", "Content-Length", "Content-MD5", "Content-Type",
        "Date", "If-Modified-Since", "If-Match", "If-None-Match", "If-Unmodified-Since", "Range"}) {
    std::string v = HeaderValue(request.headers, h);
    if (std::string_view(h) == "Content-Length" && v == "0") v.clear();
    sts += "\n" + v;
  }
  sts += "\n";
  // Canonicalized headers: x-ms-*, names lower-cased and sorted, values trimmed.
  std::vector<std::pair<std::string, std::string>> ms;
  for (const auto& [k, v] : request.headers) {
    std::string name = ToLower(Trim(k));
    if (name.compare(0, 5, "x-ms-") == 0) ms.emplace_back(std::move(name), Trim(v));
  }
  std::stable_sort(ms.begin(), ms.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [k, v] : ms) sts += k + ":" + v + "\n";
  // Canonicalized resource.
  sts += "/" + std::string(account) + request.path;
  std::map<std::string, std::vector<std::string>> query;
  for (const auto& [k, v] : request.query) query[ToLower(k)].push_back(v);
  for (auto& [k, values] : query) {
    std::sort(values.begin(), values.end());
    sts += "\n" + k + ":";
    for (size_t i = 0; i < values.size(); ++i) sts += (i ? "," : "") + values[i];
  }
  return sts;
}

std::string AzureSharedKeySigner::Signature(std::string_view string_to_sign) const {
  return Base64Encode(HmacSha256(key_, string_to_sign));
}

Result<SignedParts> AzureSharedKeySigner::Sign(const SignableRequest& request,
                                               std::chrono::system_clock::time_point now) const {
  SignedParts parts;
  parts.headers = DateAndVersion(now);
  SignableRequest full = request;
  full.headers.insert(full.headers.end(), parts.headers.begin(), parts.headers.end());
  parts.headers.emplace_back(
      "Authorization", "SharedKey " + account_ + ":" + Signature(StringToSign(full, account_)));
  parts.generation = 1;
  return parts;
}

std::string AzureSharedKeySigner::DescribeJson() const {
  nlohmann::json j = {{"source", "shared key"}, {"from", source_}, {"account", account_}};
  return j.dump();
}

QueryTokenSigner::QueryTokenSigner(std::string token, std::string source, std::string path,
                                   Flavor flavor)
    : source_(std::move(source)), path_(std::move(path)), flavor_(flavor) {
  MutexLock l(&mu_);
  token_ = std::move(token);
}

std::shared_ptr<QueryTokenSigner> QueryTokenSigner::FromToken(std::string token,
                                                              std::string source) {
  return std::shared_ptr<QueryTokenSigner>(
      new QueryTokenSigner(CleanToken(token), std::move(source), "", Flavor::kAzureSas));
}

Result<std::shared_ptr<QueryTokenSigner>> QueryTokenSigner::FromFile(std::string path,
                                                                     Flavor flavor) {
  auto read = ReadSasFile(path, flavor);
  if (!read.has_value()) return Err(read.error());
  std::shared_ptr<QueryTokenSigner> signer(new QueryTokenSigner(
      read->token, flavor == Flavor::kAzureSas ? "option sas_file" : "option query_file",
      std::move(path), flavor));
  MutexLock l(&signer->mu_);
  signer->stamp_ = {read->dev, read->ino, read->size, read->mtime_ns};
  signer->last_check_ = std::chrono::system_clock::now();
  return signer;
}

void QueryTokenSigner::CheckFileLocked() const {
  if (path_.empty()) return;
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    last_error_ = Status::FromErrno(source_ + " " + path_, errno).message();
    return;
  }
  FileStamp now{st.st_dev, st.st_ino, st.st_size,
                int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  if (now == stamp_) return;
  auto read = ReadSasFile(path_, flavor_);
  if (!read.has_value()) {
    // Keep the last good token; a half-written file gets another look when it changes again.
    last_error_ = read.error().message();
    stamp_ = now;
    return;
  }
  stamp_ = {read->dev, read->ino, read->size, read->mtime_ns};
  last_error_.clear();
  if (read->token != token_) {
    WipeString(token_);
    token_ = std::move(read->token);
    ++generation_;
  }
}

Result<SignedParts> QueryTokenSigner::Sign(const SignableRequest& /*request*/,
                                           std::chrono::system_clock::time_point now) const {
  SignedParts parts;
  if (flavor_ == Flavor::kAzureSas) parts.headers = DateAndVersion(now);
  MutexLock l(&mu_);
  if (!path_.empty() && (now < last_check_ || now - last_check_ >= std::chrono::seconds(1))) {
    CheckFileLocked();
    last_check_ = now;
  }
  parts.query = token_;
  parts.generation = generation_;
  return parts;
}

bool QueryTokenSigner::OnRefused(uint64_t generation, long /*status*/,
                                 std::string_view /*code*/) const {
  if (path_.empty()) return false;
  MutexLock l(&mu_);
  CheckFileLocked();
  return generation_ != generation;
}

void QueryTokenSigner::Reload() const {
  MutexLock l(&mu_);
  CheckFileLocked();
}

std::string QueryTokenSigner::DescribeJson() const {
  MutexLock l(&mu_);
  nlohmann::json j = {{"source", flavor_ == Flavor::kAzureSas ? "sas" : "signed URL query"},
                      {"from", source_},
                      {"generation", generation_}};
  if (!path_.empty()) j["file"] = path_;
  if (std::string se = QueryParam(token_, "se"); !se.empty()) j["expires"] = se;
  if (std::string sp = QueryParam(token_, "sp"); !sp.empty()) j["permissions"] = sp;
  if (!last_error_.empty()) j["error"] = RedactAzureSecrets(last_error_);
  return j.dump();
}

// ----------------------------------------------------------------------------- factory

QueryTokenSigner::~QueryTokenSigner() {
  MutexLock l(&mu_);
  WipeString(token_);
}

Result<std::shared_ptr<RequestSigner>> MakeAzureSigner(const AzureConfig& config) {
  switch (config.auth) {
    case AzureConfig::Auth::kAnonymous:
      return std::shared_ptr<RequestSigner>(std::make_shared<AzureAnonymousSigner>());
    case AzureConfig::Auth::kSharedKey:
      return std::shared_ptr<RequestSigner>(std::make_shared<AzureSharedKeySigner>(
          config.account, config.key, config.credentials_source));
    case AzureConfig::Auth::kSas:
      return std::shared_ptr<RequestSigner>(
          QueryTokenSigner::FromToken(config.sas, config.credentials_source));
    case AzureConfig::Auth::kSasFile: {
      auto signer = QueryTokenSigner::FromFile(config.sas_file);
      if (!signer.has_value()) return Err(signer.error());
      return std::shared_ptr<RequestSigner>(std::move(*signer));
    }
  }
  return Err(Status::InvalidArgument("unknown Azure authorization"));
}

Result<AzureAccess> MakeAzureAccess(std::string_view store, const AzureOptions& options,
                                    const EnvLookup& env) {
  auto config = ResolveAzureConfig(store, options, env);
  if (!config.has_value()) return Err(config.error());
  AzureAccess access;
  auto signer = MakeAzureSigner(*config);
  WipeString(config->key);  // the signer holds them now
  WipeString(config->sas);
  if (!signer.has_value()) return Err(signer.error());
  access.signer = std::move(*signer);
  auto protocol = std::make_unique<AzureProtocol>(std::move(*config));
  access.name = protocol->Name("");
  access.protocol = std::move(protocol);
  return access;
}

}  // namespace pcrfs
