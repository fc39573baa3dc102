// One blocking HTTP request on curl's easy interface, for the few requests that are not store
// reads: the credential chain's calls to STS, the container credentials endpoint and EC2
// instance metadata. The store's own requests go through HttpClient (remote/http_client.h).
//
// Threads: SimpleHttp() may be called from any thread, concurrently; each call has its own easy
// handle and connection. It blocks for at most `timeout`.
// Secrets: nothing is logged here; header values and bodies (tokens, keys) appear in no error.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"
#include "remote/sigv4.h"

namespace pcrfs {

struct SimpleHttpRequest {
  std::string method = "GET";  // GET, PUT or POST
  std::string url;
  HeaderList headers;  // sent as given
  std::string body;    // PUT and POST
  // The whole request, connecting included; and connecting alone. A machine without the
  // link-local metadata services must answer "nothing there" quickly.
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds connect_timeout{1000};
  // A credential endpoint of this machine's (container, instance metadata): never through a
  // proxy, whatever the proxy variables say (the proxy would see its token and credentials).
  bool direct = false;
};

struct SimpleHttpResponse {
  long status = 0;
  std::string body;  // at most kSimpleHttpMaxBody bytes
};

// Answers larger than this are refused: credentials answers are a few KiB.
inline constexpr size_t kSimpleHttpMaxBody = size_t{1} << 20;

// The NO_PROXY list curl gets: `user`'s (NO_PROXY / no_proxy, which CURLOPT_NOPROXY would
// otherwise replace) with loopback and link-local addresses added, which no proxy ever sees.
// "*" (no proxy for anything) stays "*".
std::string NoProxyList(std::string_view user);

// Sends the request and returns the status and body of any HTTP answer (a 4xx or 5xx is a
// response, not an error). Errors (IOError, one line naming the URL without its query):
// connection refused, timeout, TLS failure, a body over kSimpleHttpMaxBody.
Result<SimpleHttpResponse> SimpleHttp(const SimpleHttpRequest& request);

}  // namespace pcrfs
