// How a request to an object store is authorized: the seam between the HTTP client (which sends
// requests and retries them) and where authority comes from (AWS credentials that renew, an
// Azure account key, a bearer token in a file that rotates, a signed URL's query).
//
// The client calls Sign() on every try, so a retry is signed with whatever is current then.
// When a server refuses a request for its authority (RefusalIsAuth), the client reports it with
// OnRefused() and retries, re-signed, a bounded number of times: the signer may have renewed.
//
// Threads: Sign() and OnRefused() run on the HTTP client's I/O thread and must never block on
// the network or a process (renewal runs elsewhere). Reload() and Describe() may be called from
// any thread. Implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pcrfs {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// What a signer sees of one try of a request.
struct SignableRequest {
  std::string method = "GET";  // "GET", "HEAD", "PUT", "POST" or "DELETE"
  std::string host;            // the Host header's value
  std::string path = "/";      // as sent, URI-encoded once
  HeaderList query;            // decoded name/value pairs, in the URL's order
  // Headers that will be sent and that a signature may cover (Host, Range, If-None-Match).
  HeaderList headers;
  // The body's length and hex SHA-256 ("" when not computed: S3 signs UNSIGNED-PAYLOAD, or
  // the empty body's hash when content_length is 0).
  uint64_t content_length = 0;
  std::string payload_sha256;
};

struct SignedParts {
  HeaderList headers;  // to add to the request
  // Query parameters to append to the URL (already encoded "name=value" pairs joined by '&',
  // without '?'): a SAS or CDN token. Never logged: the client redacts every query.
  std::string query;
  // Which authority signed this try (increases when credentials change): OnRefused gets it.
  uint64_t generation = 0;
};

class RequestSigner {
 public:
  virtual ~RequestSigner() = default;

  // The authority to add to one try. Errors fail the request at once, not retried (e.g.
  // "no credentials": a source that has none yet and cannot say when).
  virtual Result<SignedParts> Sign(const SignableRequest& request,
                                   std::chrono::system_clock::time_point now) const = 0;

  // A try signed with `generation` was refused for its authority (status and the server's
  // error code, e.g. 403 "ExpiredToken"). Starts a renewal if none is running and the
  // authority is still that generation. Returns false when retrying cannot help (static keys
  // that did not change: the refusal stands).
  virtual bool OnRefused(uint64_t generation, long status, std::string_view code) const {
    (void)generation;
    (void)status;
    (void)code;
    return false;
  }

  // Reads files and sources again (SIGHUP): credentials files, token files, header files.
  virtual void Reload() const {}

  // What user.pcrfs.remote shows of the authority, as a JSON object: {"source": "...",
  // "expires": "...", "renewals": N, ...}. Never a secret.
  virtual std::string DescribeJson() const = 0;
};

// True if an answer with this status and error code means "the authority was refused" (so a
// renewed one may succeed), not "the object is not yours" (AccessDenied) or a bad request:
// 401; 400/403 with ExpiredToken, InvalidToken, TokenRefreshRequired, InvalidAccessKeyId,
// SignatureDoesNotMatch, RequestExpired (AWS); AuthenticationFailed,
// AuthorizationFailure (Azure, for a SAS that expired).
bool RefusalIsAuth(long status, std::string_view code);

}  // namespace pcrfs
