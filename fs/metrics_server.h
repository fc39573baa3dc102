// A mount's Prometheus metrics (-o metrics, -o metrics_file, -o metrics_label): what they say
// (RenderMountMetrics: the counters the daemon keeps anyway, read at scrape time), a tiny
// HTTP/1.1 server for GET /metrics, and the textfile writer for node_exporter.
//
// The server: one thread polling up to kMaxConnections connections at once (more are closed at
// once), one request per connection (Connection: close), at most kMaxRequestBytes of request
// head and kRequestTimeout each for the head and the reply (idle clients delay nobody); GET or
// HEAD /metrics (any query) is 200, another path 404, another method 405, a render that throws
// 500 (logged once). It never touches a FUSE thread:
// rendering reads atomics and takes only the short locks of the caches' stats().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pcrfs {
class ObjectClient;
class RangeCache;
}  // namespace pcrfs

namespace pcrfs::fs {

class Filesystem;

// What a mount's metrics are read from. client and cache: a remote store's (nullptr: local).
struct MetricsSources {
  const Filesystem* fs = nullptr;
  const ObjectClient* client = nullptr;
  const RangeCache* cache = nullptr;
  int level = 0;  // the level at the root; 0: the ladder of scan1..scan10
};

// The exposition text (format 0.0.4) of every metric of the mount, each series with `labels`
// (mount first, then -o metrics_label's). README "Monitoring" lists them.
std::string RenderMountMetrics(const MetricsSources& sources, const metrics::Labels& labels);

class MetricsServer {
 public:
  static constexpr size_t kMaxRequestBytes = 8192;
  // Each connection's time for its request head, and then for the reply.
  static constexpr std::chrono::seconds kRequestTimeout{2};
  // Connections served at once; one more is accepted and closed at once.
  static constexpr size_t kMaxConnections = 64;
  // How long accepting waits after running out of descriptors (EMFILE, ENFILE).
  static constexpr std::chrono::milliseconds kAcceptBackoff{100};

  // Binds and listens on "HOST:PORT" (MountConfig::metrics_address; "[ADDR]:PORT" for IPv6,
  // port 0: any free one). Call before the daemon forks, so a failure is reported at mount:
  // IOError "-o metrics=ADDRESS: cannot listen: REASON". The socket survives the fork.
  static Result<std::unique_ptr<MetricsServer>> Listen(const std::string& address);
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // "HOST:PORT" with the port bound (the real one for port 0).
  std::string address() const { return address_; }

  // Starts the thread answering requests with render()'s text (after the fork: a thread does
  // not survive one). At most once.
  void Start(std::function<std::string()> render);
  // Ends the thread (connections still open are closed).
  void Stop();

 private:
  MetricsServer() = default;
  struct Conn;
  void Run();
  void Step(Conn* c);  // after poll said it is ready; closes c->fd when it is done
  std::string Reply(const std::string& request);  // "" : a head too large

  UniqueFd listen_fd_;
  UniqueFd wake_read_, wake_write_;  // a byte here ends Run
  std::string address_;
  std::function<std::string()> render_;
  bool render_failed_ = false;  // logged once until a render succeeds
  std::thread thread_;
};

// Rewrites `path` with render()'s text every `interval` (write to a temporary file, fsync,
// rename: a reader sees the old file or the new one, never a part), from a thread of its own,
// the first time at once and the last time when it is destroyed (the file keeps the final
// counts). A failed write is logged once until a write succeeds again.
class MetricsFileWriter {
 public:
  MetricsFileWriter(std::string path, std::chrono::seconds interval,
                    std::function<std::string()> render);
  ~MetricsFileWriter();  // writes the file once more and stops the thread
  MetricsFileWriter(const MetricsFileWriter&) = delete;
  MetricsFileWriter& operator=(const MetricsFileWriter&) = delete;

 private:
  void Run() EXCLUDES(mu_);
  Status WriteOnce();  // renders (an exception is an error) and writes the file

  const std::string path_;
  const std::chrono::seconds interval_;
  const std::function<std::string()> render_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pcrfs::fs
