// Store URLs: s3://BUCKET[/PREFIX], http://HOST[:PORT][/PATH] and https://... Parsing, joining a
// store URL with a name inside the store, the URI encoding S3's SigV4 wants, and a form of a URL
// that is safe to print. Pure functions: thread-safe, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pcrfs {

// True if s starts with "s3://", "gs://", "az://", "http://" or "https://" (case-insensitive
// scheme): a store named by s is remote. Anything else is a local path, exactly as before.
bool IsRemoteUrl(std::string_view s);

struct Url {
  // kGs: Google Cloud Storage through its S3-compatible XML API (an S3 store with Google's
  // endpoint and HMAC keys).
  enum class Scheme { kS3, kGs, kHttp, kHttps };

  Scheme scheme = Scheme::kHttp;
  // http(s): the host name or IP literal, without brackets ("::1"); s3: the bucket.
  std::string host;
  // http(s): the port (80/443 when the URL has none); s3: 0.
  uint16_t port = 0;
  // http(s): the path as given (already URI-encoded), starting with '/', without a trailing '/'
  // ("" for the server's root). s3: the key prefix, not encoded, without leading or trailing '/'
  // ("" for the whole bucket).
  std::string path;

  // http(s): the query of a signed URL, without '?' ("sv=...&sig=..."), sent with every object
  // request and never shown (ToString and RedactUrl leave it out). s3/gs: always empty.
  std::string query;

  bool is_s3() const { return scheme == Scheme::kS3 || scheme == Scheme::kGs; }
  // "host" or "host:port" when the port is not the scheme's default; IPv6 literals in brackets.
  // This is the Host header's value. s3: the bucket.
  std::string Authority() const;
  // The URL again, normalized ("https://h:8443/a/b", "s3://bucket/prefix"). Never contains
  // credentials (Parse refuses user info).
  std::string ToString() const;
  // The URL of `name` (a relative name such as "records/00000042.pcr") inside this store URL:
  // http(s) gets the name URI-encoded segment by segment; s3 gets "PREFIX/name" as the prefix.
  Url Join(std::string_view name) const;
};

// Parses a store URL. Errors (InvalidArgument, naming the redacted URL): an unknown scheme, an
// empty host or bucket, a bad port, user info ("user:pass@": credentials never go in a URL, use
// the environment or a headers file), a fragment, a query on s3:// or gs:// (an http(s) URL's
// query is kept in Url::query), "." or ".." segments, an invalid bucket name. az:// URLs are
// remote/azure.h's.
Result<Url> ParseUrl(std::string_view s);

// SigV4 URI encoding (the AWS rules): every byte except A-Z a-z 0-9 - . _ ~ becomes %XX
// (upper-case hex); '/' is kept when keep_slash. Applied once to the raw key: S3 is never
// double-encoded.
std::string UriEncode(std::string_view s, bool keep_slash);

// %XX decoded ('+' stays '+': paths and names are not forms); nullopt for a '%' not followed
// by two hex digits.
std::optional<std::string> PercentDecode(std::string_view s);

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm): what
// timegm computes, without its time zone state. For the dates of HTTP, ISO 8601 and S3.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d);

// An ISO 8601 time with a zone, as S3 listings (LastModified) and AWS credential documents
// (Expiration) write it: YYYY-MM-DDThh:mm:ss[.fraction](Z|+hh[:mm]|-hh[:mm]), the T also 't'
// or ' '; years 1970..2200 (the system clock's nanoseconds since 1970 end in 2262). Seconds and
// nanoseconds since 1970-01-01 UTC; nullopt for anything else (no zone: nothing certain).
struct IsoTime {
  int64_t sec = 0;
  uint32_t nsec = 0;
};
std::optional<IsoTime> ParseIsoTimeUtc(std::string_view s);

// s without user info, query and fragment ("https://u:p@h/x?token=1" -> "https://h/x"): for
// error messages and logs about any string that may be a URL, parsed or not.
std::string RedactUrl(std::string_view s);

// True for a host that is this machine's loopback: "localhost", an IPv4 literal in
// 127.0.0.0/8, or ::1 (brackets allowed). A name that merely starts with "127." is not.
bool IsLoopbackHost(std::string_view host);

// Blanks in place the query of every argument that holds a URL ('*' for each byte after '?'):
// a signed URL's query (a SAS token, a pre-signature) would otherwise stay readable by every
// local user in /proc/PID/cmdline for as long as the process runs. The caller keeps its own
// copies of the arguments. pcrfs and pcr both call it.
void BlankUrlQueriesInArgv(int argc, char** argv);

}  // namespace pcrfs
