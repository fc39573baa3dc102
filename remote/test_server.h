// A scripted HTTP/1.1 server on 127.0.0.1 for the client's unit tests: each connection serves
// one request with what the handler returns (raw bytes, then close or reset), so tests can
// produce exactly the faults a real server or network produces.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pcrfs {

struct TestReply {
  std::string bytes;   // status line, headers and body as sent
  bool reset = false;  // RST instead of FIN after sending
  int delay_ms = 0;    // before sending
  // After this many bytes of `bytes` are sent, wait until Release() (a body that stalls; 0:
  // never).
  size_t hold_after = 0;
};

class TestHttpServer {
 public:
  using Handler = std::function<TestReply(const std::string& request, int n)>;

  // On 127.0.0.1, or on ::1 with ipv6 (ok() is false where the host has no IPv6 loopback).
  explicit TestHttpServer(Handler handler, bool ipv6 = false)
      : handler_(std::move(handler)), host_(ipv6 ? "[::1]" : "127.0.0.1") {
    fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss{};
    socklen_t len;
    if (ipv6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_loopback;
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(*a);
    }
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ipv6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    ::listen(fd_, 64);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TestHttpServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      released_cv_.notify_all();
    }
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (auto& t : workers_) t.join();
  }

  std::string url(const std::string& path) const {
    return "http://" + host_ + ":" + std::to_string(port_) + path;
  }
  bool ok() const { return ok_; }
  int requests() const { return count_.load(); }
  std::vector<std::string> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

  // Lets every reply held at hold_after go on.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    released_cv_.notify_all();
  }

  static TestReply Reply(int status, const std::string& reason, const std::string& body,
                         const std::string& headers = "") {
    return {"HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n" + headers + "\r\n" + body};
  }

  // How ServeRanges answers a request for several ranges.
  enum class Ranges {
    kMultipart,  // 206 multipart/byteranges, as nginx does
    kFirst,      // 206 of the first range only (a server without multi-range support)
    kWhole,      // 200 with the whole object (a server that ignores Range)
  };
  // Serves `obj`: 200 without a Range header, 206 for one range ("bytes=A-B"), and for several
  // as `mode` says. Every answer carries ETag "v1".
  static TestReply ServeRanges(const std::string& obj, const std::string& req,
                               Ranges mode = Ranges::kMultipart) {
    const size_t p = req.find("Range: bytes=");
    if (p == std::string::npos || mode == Ranges::kWhole) {
      return Reply(200, "OK", obj, "ETag: \"v1\"\r\n");
    }
    std::vector<std::pair<size_t, size_t>> ranges;  // [a, b], clipped to the object
    const std::string spec = req.substr(p + 13, req.find("\r\n", p) - p - 13);
    for (size_t at = 0; at < spec.size();) {
      size_t comma = spec.find(',', at);
      if (comma == std::string::npos) comma = spec.size();
      size_t a = 0, b = 0;
      std::sscanf(spec.substr(at, comma - at).c_str(), "%zu-%zu", &a, &b);
      ranges.emplace_back(a, std::min(b, obj.size() - 1));
      at = comma + 1;
    }
    const auto content_range = [&obj](size_t a, size_t b) {
      return "Content-Range: bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" +
             std::to_string(obj.size()) + "\r\n";
    };
    if (ranges.size() == 1 || mode == Ranges::kFirst) {
      const auto [a, b] = ranges.front();
      return Reply(206, "Partial Content", obj.substr(a, b - a + 1),
                   "ETag: \"v1\"\r\n" + content_range(a, b));
    }
    const std::string boundary = "00000000000000000042";
    std::string body;
    for (const auto& [a, b] : ranges) {
      body += "\r\n--" + boundary + "\r\nContent-Type: application/octet-stream\r\n" +
              content_range(a, b) + "\r\n" + obj.substr(a, b - a + 1);
    }
    body += "\r\n--" + boundary + "--\r\n";
    return Reply(
        206, "Partial Content", body,
        "ETag: \"v1\"\r\nContent-Type: multipart/byteranges; boundary=" + boundary + "\r\n");
  }

 private:
  void Serve() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      workers_.emplace_back([this, c] { Handle(c); });
    }
  }
  void Handle(int c) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      req.append(buf, static_cast<size_t>(n));
    }
    // A request's body (a PUT's, a POST's) is read whole, by its Content-Length.
    const size_t head_end = req.find("\r\n\r\n");
    const size_t cl = req.find("Content-Length: ");
    if (head_end != std::string::npos && cl != std::string::npos && cl < head_end) {
      const size_t want = head_end + 4 + std::strtoull(req.c_str() + cl + 16, nullptr, 10);
      while (req.size() < want) {
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
    }
    int n = ++count_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(req);
    }
    TestReply r = handler_(req, n);
    if (r.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
    size_t off = 0;
    while (off < r.bytes.size()) {
      size_t stop = r.bytes.size();
      if (r.hold_after > off && r.hold_after < stop) stop = r.hold_after;
      ssize_t w = ::send(c, r.bytes.data() + off, stop - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
      if (off == r.hold_after) {
        std::unique_lock<std::mutex> lock(mu_);
        released_cv_.wait(lock, [&] { return released_ || stop_; });
      }
    }
    if (r.reset) {
      linger l{1, 0};
      ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    ::close(c);
  }

  Handler handler_;
  std::string host_;
  bool ok_ = false;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> count_{0};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<std::string> received_;
  std::condition_variable released_cv_;
  bool released_ = false;  // GUARDED_BY(mu_)
};

}  // namespace pcrfs
