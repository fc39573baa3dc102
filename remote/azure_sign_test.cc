// A test CLI over remote/azure.h for tests/e2e/test_azurite.py: what pcrfs would send, so that
// curl can send it to Azurite (the judge of the URL, the Shared Key signature and the SAS), and
// pcrfs's reading of a real listing.
//   azure_sign_test get STORE KEY [RANGE_START RANGE_END]   the signed GET of one object
//   azure_sign_test list STORE [MARKER [MAX]]              the signed List Blobs request
//   azure_sign_test parse STORE < LISTING.xml              ParseListing of an answer
// STORE is az://... or https://ACCOUNT.blob.core.windows.net/...; the account, endpoint and
// credentials come from the environment (AZURE_STORAGE_*) and the options before the command:
// --account A, --endpoint URL, --sas-file F, --no-sign, --if-none-match ETAG (sent and signed).
// Prints one JSON line: {"ok": true, "url": ..., "headers": [[name, value], ...],
// "name": ..., "auth": {...}} (parse: {"ok": true, "entries": [[key, size, mtime], ...],
// "next": ...}) or {"ok": false, "error": ...}; exits 0, 1, or 2 for bad usage.
#include <chrono>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "remote/azure.h"

namespace pcrfs {
namespace {

int Fail(const Status& s) {
  std::cout << nlohmann::json{{"ok", false}, {"error", RedactAzureSecrets(s.message())}}.dump()
            << std::endl;
  return 1;
}

int Usage() {
  std::cerr << "usage: azure_sign_test [--account A] [--endpoint URL] [--sas-file F] [--no-sign] "
               "[--if-none-match ETAG] "
               "get STORE KEY [START END] | list STORE [MARKER [MAX]] | parse STORE < XML\n";
  return 2;
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c - 'a' + 10;
    };
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The request as the HTTP client hands it to a signer: Host, the encoded path, the decoded
// query pairs, and the headers that will be sent.
SignableRequest RequestOf(const std::string& url, std::optional<std::pair<uint64_t, uint64_t>> r,
                          const std::string& if_none_match) {
  SignableRequest req;
  size_t scheme_end = url.find("://") + 3;
  size_t path_start = url.find('/', scheme_end);
  size_t q = url.find('?');
  req.host = url.substr(scheme_end, path_start - scheme_end);
  req.path = url.substr(path_start, q == std::string::npos ? std::string::npos : q - path_start);
  if (q != std::string::npos) {
    std::string_view query = std::string_view(url).substr(q + 1);
    size_t start = 0;
    while (start <= query.size()) {
      size_t amp = query.find('&', start);
      std::string_view part =
          query.substr(start, amp == std::string_view::npos ? query.npos : amp - start);
      size_t eq = part.find('=');
      req.query.emplace_back(Decode(part.substr(0, eq)),
                             eq == std::string_view::npos ? "" : Decode(part.substr(eq + 1)));
      if (amp == std::string_view::npos) break;
      start = amp + 1;
    }
  }
  req.headers.emplace_back("Host", req.host);
  if (r.has_value()) {
    req.headers.emplace_back("Range",
                             "bytes=" + std::to_string(r->first) + "-" + std::to_string(r->second));
  }
  if (!if_none_match.empty()) req.headers.emplace_back("If-None-Match", if_none_match);
  return req;
}

int Main(int argc, char** argv) {
  AzureOptions options;
  std::string if_none_match;
  int i = 1;
  for (; i < argc && std::string(argv[i]).rfind("--", 0) == 0; ++i) {
    std::string flag = argv[i];
    if (flag == "--no-sign") {
      options.no_sign = true;
      continue;
    }
    if (i + 1 >= argc) return Usage();
    if (flag == "--account") {
      options.account = argv[++i];
    } else if (flag == "--endpoint") {
      options.endpoint = argv[++i];
    } else if (flag == "--sas-file") {
      options.sas_file = argv[++i];
    } else if (flag == "--if-none-match") {
      if_none_match = argv[++i];
    } else {
      return Usage();
    }
  }
  if (argc - i < 2) return Usage();
  const std::string cmd = argv[i], store = argv[i + 1];
  auto access = MakeAzureAccess(store, options);
  if (!access.has_value()) return Fail(access.error());

  if (cmd == "parse") {
    std::string body((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    auto listing = access->protocol->ParseListing(body);
    if (!listing.has_value()) return Fail(listing.error());
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : listing->entries) entries.push_back({e.key, e.size, e.mtime_sec});
    std::cout
        << nlohmann::json{{"ok", true}, {"entries", entries}, {"next", listing->next_token}}.dump()
        << std::endl;
    return 0;
  }

  std::string url;
  std::optional<std::pair<uint64_t, uint64_t>> range;
  if (cmd == "get" && argc - i >= 3) {
    url = access->protocol->ObjectUrl(argv[i + 2]);
    if (argc - i == 5) range = {std::stoull(argv[i + 3]), std::stoull(argv[i + 4])};
  } else if (cmd == "list") {
    auto list = access->protocol->ListUrl(argc - i >= 3 ? argv[i + 2] : "",
                                          argc - i >= 4 ? std::stoul(argv[i + 3]) : 0);
    if (!list.has_value()) return Fail(list.error());
    url = *list;
  } else {
    return Usage();
  }
  SignableRequest req = RequestOf(url, range, if_none_match);
  auto signed_parts = access->signer->Sign(req, std::chrono::system_clock::now());
  if (!signed_parts.has_value()) return Fail(signed_parts.error());
  if (!signed_parts->query.empty()) {
    url += (url.find('?') == std::string::npos ? "?" : "&") + signed_parts->query;
  }
  nlohmann::json headers = nlohmann::json::array();
  for (const auto& [k, v] : req.headers) {
    if (k != "Host") headers.push_back({k, v});
  }
  for (const auto& [k, v] : signed_parts->headers) headers.push_back({k, v});
  std::cout << nlohmann::json{{"ok", true},
                              {"url", url},
                              {"headers", headers},
                              {"name", access->name},
                              {"auth", nlohmann::json::parse(access->signer->DescribeJson())}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace pcrfs

int main(int argc, char** argv) { return pcrfs::Main(argc, argv); }
