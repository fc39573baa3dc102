#include "remote/simple_http.h"

#include <curl/curl.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "remote/url.h"

namespace pcrfs {
namespace {

struct Sink {
  std::string body;
  bool too_large = false;
};

size_t Write(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  if (sink->body.size() + bytes > kSimpleHttpMaxBody) {
    sink->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  sink->body.append(data, bytes);
  return bytes;
}

// The URL as errors may show it: no query (it may carry a token), no user info.
std::string ShownUrl(const std::string& url) { return RedactUrl(url.substr(0, url.find('?'))); }

}  // namespace

std::string NoProxyList(std::string_view user) {
  // Trimmed of blanks: "*" alone means every host (curl's rule).
  while (!user.empty() && (user.front() == ' ' || user.front() == ',')) user.remove_prefix(1);
  while (!user.empty() && (user.back() == ' ' || user.back() == ',')) user.remove_suffix(1);
  if (user == "*") return "*";
  std::string list(user);
  if (!list.empty()) list += ',';
  return list + "localhost,127.0.0.0/8,::1,169.254.0.0/16,fe80::/10,fd00:ec2::/32";
}

Result<SimpleHttpResponse> SimpleHttp(const SimpleHttpRequest& request) {
  static std::once_flag once;
  static CURLcode global = CURLE_OK;
  // curl_global_init is not thread-safe; HttpClient calls it too, and it counts its callers.
  std::call_once(once, [] { global = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (global != CURLE_OK) return Err(Status::IOError("curl_global_init failed"));

  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) return Err(Status::IOError("curl_easy_init failed"));
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr,
                                                                      &curl_slist_free_all);
  for (const auto& [name, value] : request.headers) {
    curl_slist* l = curl_slist_append(headers.get(), (name + ": " + value).c_str());
    if (l == nullptr) return Err(Status::ResourceExhausted("curl_slist_append failed"));
    headers.release();
    headers.reset(l);
  }
  // "Expect: 100-continue" would cost a round trip on a POST; the services do not need it.
  curl_slist* l = curl_slist_append(headers.get(), "Expect:");
  if (l == nullptr) return Err(Status::ResourceExhausted("curl_slist_append failed"));
  headers.release();
  headers.reset(l);

  Sink sink;
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(request.connect_timeout.count()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  // Proxies are for the store's traffic: loopback and link-local addresses (the metadata
  // endpoints) never go through one, and the user's NO_PROXY still holds (CURLOPT_NOPROXY
  // replaces it, so it is part of the list). A credential endpoint is reached directly.
  const char* user = std::getenv("no_proxy");
  if (user == nullptr || user[0] == '\0') user = std::getenv("NO_PROXY");
  const std::string no_proxy = NoProxyList(user == nullptr ? "" : user);
  curl_easy_setopt(c, CURLOPT_NOPROXY, no_proxy.c_str());
  if (request.direct) curl_easy_setopt(c, CURLOPT_PROXY, "");
  if (request.method == "GET") {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "POST" || request.method == "PUT") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    if (request.method == "PUT") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
  } else {
    return Err(Status::InvalidArgument("SimpleHttp: method " + request.method + " not supported"));
  }
  const CURLcode rc = curl_easy_perform(c);
  if (sink.too_large) {
    return Err(Status::IOError(ShownUrl(request.url) + ": answer larger than " +
                               std::to_string(kSimpleHttpMaxBody) + " bytes"));
  }
  if (rc != CURLE_OK) {
    return Err(Status::IOError(ShownUrl(request.url) + ": " + curl_easy_strerror(rc)));
  }
  SimpleHttpResponse response;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(sink.body);
  return response;
}

}  // namespace pcrfs
