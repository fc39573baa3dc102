// A test CLI over pcrfs_remote, for the end-to-end tests against the servers of tests/remote:
//   pcr_fetch_test read STORE_URL NAME OFFSET LENGTH SIZE   ranged read through RemoteFile
//   pcr_fetch_test download STORE_URL NAME DEST [ETAG]      Download()
//   pcr_fetch_test list s3://BUCKET/PREFIX                   one ListObjectsV2 page: its keys
//   pcr_fetch_test bench STORE_URL NAME SIZE REQUESTS LENGTH IN_FLIGHT
//                                        random ranged GETs, IN_FLIGHT at a time (async Fetch)
// STORE_URL is s3://... (configured from the environment like the AWS CLI) or http(s)://...
// Options before the command: --deadline-ms N, --ca-file F, --headers-file F, --no-sign,
// --max-attempts N. Prints one JSON line: {"ok": true, "sha256": ..., "stats": {...}} or
// {"ok": false, "code": ..., "error": ...}; exits 0 or 1 (2 for bad usage).
#include <condition_variable>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "remote/aws_credentials.h"
#include "remote/http_client.h"
#include "remote/object_protocols.h"
#include "remote/remote_file.h"
#include "remote/s3_config.h"
#include "remote/url.h"

namespace pcrfs {
namespace {

const char* CodeName(Status::Code c) {
  switch (c) {
    case Status::Code::kOk:
      return "ok";
    case Status::Code::kNotFound:
      return "not_found";
    case Status::Code::kCorruption:
      return "corruption";
    case Status::Code::kIOError:
      return "io_error";
    case Status::Code::kInvalidArgument:
      return "invalid_argument";
    default:
      return "other";
  }
}

int Fail(const Status& s, const HttpClient* client) {
  nlohmann::json j = {{"ok", false}, {"code", CodeName(s.code())}, {"error", s.message()}};
  if (client != nullptr) j["stats"] = nlohmann::json::parse(client->stats().ToJson());
  std::cout << j.dump() << std::endl;
  return 1;
}

// Keeps `in_flight` random ranged GETs of `length` bytes outstanding until `requests` are done.
int Bench(HttpClient& client, const std::string& url, uint64_t size, uint64_t requests,
          uint64_t length, uint64_t in_flight) {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t started = 0, finished = 0, failed = 0;
  std::mt19937_64 rng(1);
  std::vector<std::string> bufs(in_flight, std::string(length, '\0'));
  std::function<void(size_t)> start = [&](size_t slot) {
    HttpRequest r;
    r.url = url;
    r.range = ByteRange{rng() % (size - length + 1), length};
    r.dst = reinterpret_cast<uint8_t*>(bufs[slot].data());
    r.dst_size = length;
    ++started;
    client.Fetch(r, [&, slot](Result<HttpResponse> res) {
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      if (!res.has_value()) ++failed;
      if (started < requests) start(slot);
      cv.notify_all();
    });
  };
  auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < in_flight && started < requests; ++i) start(i);
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished == requests; });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  HttpStats st = client.stats();
  nlohmann::json out = {{"ok", failed == 0},
                        {"seconds", secs},
                        {"requests_per_s", static_cast<double>(requests) / secs},
                        {"mbit_per_s", static_cast<double>(st.bytes_received) * 8 / secs / 1e6},
                        {"stats", nlohmann::json::parse(st.ToJson())}};
  std::cout << out.dump() << std::endl;
  return failed == 0 ? 0 : 1;
}

int Main(int argc, char** argv) {
  HttpClientOptions options;
  S3Options s3;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--deadline-ms") {
      options.deadline = std::chrono::milliseconds(std::stol(next()));
    } else if (a == "--max-attempts") {
      options.max_attempts = std::stoi(next());
    } else if (a == "--ca-file") {
      options.ca_file = next();
    } else if (a == "--headers-file") {
      options.headers_file = next();
    } else if (a == "--no-sign") {
      s3.no_sign = true;
    } else {
      args.push_back(a);
    }
  }
  if (args.size() == 2 && args[0] == "list") args.push_back("");
  if (args.size() < 3) {
    std::cerr << "usage: pcr_fetch_test [options] read|download STORE_URL NAME ...\n";
    return 2;
  }
  auto store = ParseUrl(args[1]);
  if (!store.has_value()) return Fail(store.error(), nullptr);
  std::unique_ptr<ObjectProtocol> protocol;
  if (store->is_s3()) {
    auto config = ResolveS3Config(*store, s3);
    if (!config.has_value()) return Fail(config.error(), nullptr);
    if (config->aws_credentials != nullptr) {
      Status started = config->aws_credentials->StartRenewal();
      if (!started.ok()) return Fail(started, nullptr);
      options.signer =
          std::make_shared<SigV4RequestSigner>(config->aws_credentials, config->region);
    }
    protocol = std::make_unique<S3Protocol>(*config);
  } else {
    protocol = std::make_unique<HttpProtocol>(*store);
  }
  const std::string url = protocol->ObjectUrl(args[2]);
  auto created = HttpClient::Create(options);
  if (!created.has_value()) return Fail(created.error(), nullptr);
  std::shared_ptr<HttpClient> client(std::move(*created));
  std::shared_ptr<ObjectClient> objects = MakeHttpObjectClient(client, std::move(protocol));
  nlohmann::json out = {{"ok", true}};
  if (args[0] == "read" && args.size() == 6) {
    uint64_t offset = std::stoull(args[3]), length = std::stoull(args[4]);
    RemoteFile file(objects, args[2], std::stoull(args[5]));
    std::string buf(length, '\0');
    Status s = file.Read(offset, length, reinterpret_cast<uint8_t*>(buf.data()));
    if (!s.ok()) return Fail(s, client.get());
    out["sha256"] = Sha256Hex(buf);
    out["name"] = file.name();
  } else if (args[0] == "download" && (args.size() == 4 || args.size() == 5)) {
    auto r = Download(*objects, args[2], args[3], args.size() == 5 ? args[4] : "");
    if (!r.has_value()) return Fail(r.error(), client.get());
    out["modified"] = r->modified;
    out["etag"] = r->etag;
    out["size"] = r->size;
  } else if (args[0] == "list" && store->is_s3()) {
    auto page = objects->List("", 1000);
    if (!page.has_value()) return Fail(page.error(), client.get());
    // Keys as stored (the prefix in front), as the test uploaded them.
    const std::string prefix = store->path.empty() ? "" : store->path + "/";
    std::vector<std::string> keys;
    for (const auto& e : page->entries) keys.push_back(prefix + e.key);
    out["keys"] = keys;
  } else if (args[0] == "bench" && args.size() == 7) {
    return Bench(*client, url, std::stoull(args[3]), std::stoull(args[4]), std::stoull(args[5]),
                 std::stoull(args[6]));
  } else {
    std::cerr << "pcr_fetch_test: bad arguments\n";
    return 2;
  }
  out["stats"] = nlohmann::json::parse(client->stats().ToJson());
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace pcrfs

int main(int argc, char** argv) { return pcrfs::Main(argc, argv); }
