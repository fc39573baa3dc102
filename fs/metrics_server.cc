#include "fs/metrics_server.h"

#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "common/heap_trimmer.h"
#include "common/log.h"
#include "common/proc_self.h"
#include "common/thread_name.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "remote/aws_credentials.h"
#include "remote/object_client.h"
#include "remote/range_cache.h"

namespace pcrfs::fs {
namespace {

using Type = metrics::Exposition::Type;
using Clock = std::chrono::steady_clock;

const auto kProcessStart = std::chrono::system_clock::now();

double D(uint64_t v) { return static_cast<double>(v); }

// HttpStats' millisecond buckets as a histogram in seconds; sum in microseconds.
metrics::Histogram::Snapshot MsBuckets(const std::array<uint64_t, 15>& counts, uint64_t sum_us) {
  metrics::Histogram::Snapshot h;
  for (uint32_t ms : HttpStats::kLatencyBoundsMs) h.bounds.push_back(ms / 1000.0);
  h.counts.assign(counts.begin(), counts.end());
  h.sum = static_cast<double>(sum_us) / 1e6;
  return h;
}
static_assert(HttpStats::kLatencyBoundsMs.size() + 1 == 15);

void AppendServed(const Filesystem& fs, metrics::Exposition* e) {
  const Filesystem::LevelCounters c = fs.level_counters();
  auto by_level = [&](std::string_view name, std::string_view help,
                      const std::array<uint64_t, index::kNumGroups>& v) {
    e->Family(name, Type::kCounter, help);
    for (size_t i = 0; i < v.size(); ++i) e->Sample({{"level", std::to_string(i + 1)}}, D(v[i]));
  };
  by_level("pcrfs_bytes_served_total",
           "Bytes returned to readers by READ replies and pushed into the page cache, by level.",
           c.bytes);
  by_level("pcrfs_files_served_total",
           "Files read from their first byte or pushed into the page cache, by level.", c.files);
  by_level("pcrfs_source_bytes_total",
           "Bytes the source files would have taken for the same reads, by level.", c.source_bytes);
  by_level("pcrfs_bytes_saved_total",
           "Bytes the reads did not take against the source files, by level.", c.saved_bytes);
  e->Counter("pcrfs_damaged_reads_total",
             "Reads answered EIO because data failed its checksum or a record is missing.",
             D(fs.damaged_reads()));
  e->Gauge("pcrfs_damaged_files", "Files found damaged since the mount.", D(fs.damaged_files()));
}

void AppendStore(const Filesystem& fs, metrics::Exposition* e) {
  const RecordScheduler::Stats s = fs.scheduler_stats();
  e->Family("pcrfs_store_reads_total", Type::kCounter,
            "Reads of record files: demand (a reader waits) or speculative (ahead of readers).");
  e->Sample({{"kind", "demand"}}, D(s.demand_reads));
  e->Sample({{"kind", "speculative"}}, D(s.speculative_reads));
  e->Family("pcrfs_store_read_bytes_total", Type::kCounter,
            "Bytes read from record files, demand or speculative.");
  e->Sample({{"kind", "demand"}}, D(s.demand_bytes));
  e->Sample({{"kind", "speculative"}}, D(s.speculative_bytes));
  e->Counter("pcrfs_store_promoted_reads_total",
             "Queued speculative reads that a demand read took over.", D(s.promoted_reads));
  e->Counter("pcrfs_store_page_cache_hit_bytes_total",
             "Record bytes found in the page cache (no device read).", D(s.cache_hit_bytes));
  e->Counter("pcrfs_store_congested_reads_total", "Demand reads that found the source congested.",
             D(s.congested));
  e->Counter("pcrfs_store_congested_seconds_total",
             "Time speculation paused for congested demand reads.", s.congested_seconds);
  e->Gauge("pcrfs_speculation_queued_bytes", "Speculative bytes queued, not read yet.",
           D(s.queued_bytes));
  e->Gauge("pcrfs_store_read_rate_bytes_per_second",
           "The source's measured streaming rate (0: not measured yet).", s.rate);
  if (auto device = proc::StorageReadBytes()) {
    e->Counter("pcrfs_process_storage_read_bytes_total",
               "Bytes the daemon caused to be read from block devices (/proc/self/io).",
               D(*device));
  }

  const PagePusher::Stats p = fs.pusher_stats();
  e->Counter("pcrfs_push_expected_files_total",
             "Files predicted to be read whose bytes are to be pushed into the page cache.",
             D(p.expected));
  // By level, as the served counters (which count them too: Filesystem::level_counters).
  e->Family("pcrfs_pushed_files_total", Type::kCounter,
            "Files pushed into the kernel's page cache, by level.");
  for (size_t i = 0; i < p.files_by_level.size(); ++i) {
    e->Sample({{"level", std::to_string(i + 1)}}, D(p.files_by_level[i]));
  }
  e->Family("pcrfs_pushed_bytes_total", Type::kCounter,
            "Bytes pushed into the kernel's page cache, by level.");
  for (size_t i = 0; i < p.bytes_by_level.size(); ++i) {
    e->Sample({{"level", std::to_string(i + 1)}}, D(p.bytes_by_level[i]));
  }
  e->Family("pcrfs_push_skipped_files_total", Type::kCounter,
            "Predicted files not pushed, by reason.");
  e->Sample({{"reason", "kernel_forgot"}}, D(p.unknown));
  e->Sample({{"reason", "evicted"}}, D(p.not_in_memory));
  e->Sample({{"reason", "damaged"}}, D(p.damaged));
  e->Sample({{"reason", "failed"}}, D(p.failed));
  e->Sample({{"reason", "over_budget"}}, D(p.over_budget));
  e->Sample({{"reason", "too_many_pending"}}, D(p.refused));
  e->Sample({{"reason", "read_first"}}, D(p.read_first));

  const PieceCache::Stats small = fs.cache().stats(), large = fs.large_file_cache().stats();
  e->Family("pcrfs_piece_cache_hits_total", Type::kCounter,
            "Memory piece cache hits, by cache (small: pieces of one checksum block; large: "
            "blocks of large files).");
  e->Sample({{"cache", "small"}}, D(small.hits));
  e->Sample({{"cache", "large"}}, D(large.hits));
  e->Family("pcrfs_piece_cache_misses_total", Type::kCounter, "Memory piece cache misses.");
  e->Sample({{"cache", "small"}}, D(small.misses));
  e->Sample({{"cache", "large"}}, D(large.misses));
  e->Family("pcrfs_piece_cache_evictions_total", Type::kCounter, "Memory piece cache evictions.");
  e->Sample({{"cache", "small"}}, D(small.evictions));
  e->Sample({{"cache", "large"}}, D(large.evictions));
  e->Family("pcrfs_piece_cache_bytes", Type::kGauge, "Bytes the memory piece caches hold.");
  e->Sample({{"cache", "small"}}, D(fs.cache().used()));
  e->Sample({{"cache", "large"}}, D(fs.large_file_cache().used()));
  e->Gauge("pcrfs_record_table_bytes",
           "Memory the parsed record tables take (piece offsets and CRCs of the groups read; "
           "bounded, least recently used out).",
           D(fs.store().TableMemoryBytes()));
  e->Gauge("pcrfs_record_table_file_bytes",
           "Bytes of the parsed record tables' rows kept in a file of the cache folder (page "
           "cache, not the daemon's heap; bounded, least recently used out).",
           D(fs.store().TableFileBytes()));
  e->Gauge("pcrfs_index_memory_bytes",
           "Heap memory the store's index takes (a format 4 index; an LMDB one is mapped).",
           D(fs.store().index().MemoryBytes()));
}

// The status of a failure reason ("403 AccessDenied" -> "403"); empty for none ("gave up: ...").
std::string StatusOf(const std::string& reason) {
  if (reason.size() >= 3 &&
      std::all_of(reason.begin(), reason.begin() + 3,
                  [](char c) { return c >= '0' && c <= '9'; }) &&
      (reason.size() == 3 || reason[3] == ' ')) {
    return reason.substr(0, 3);
  }
  return "";
}

void AppendRemote(const ObjectClient& client, const RangeCache* cache, metrics::Exposition* e) {
  const HttpStats h = client.stats();
  e->Family("pcrfs_remote_requests_total", Type::kCounter,
            "Remote GET requests: demand (a reader waits) or background (fetched ahead).");
  e->Sample({{"kind", "demand"}}, D(h.requests - std::min(h.requests, h.background_requests)));
  e->Sample({{"kind", "background"}}, D(h.background_requests));
  e->Counter("pcrfs_remote_attempts_total", "Tries sent: requests and their retries.",
             D(h.attempts));
  e->Family("pcrfs_remote_received_bytes_total", Type::kCounter,
            "Body bytes received by successful tries.");
  e->Sample({{"kind", "demand"}},
            D(h.bytes_received - std::min(h.bytes_received, h.background_bytes)));
  e->Sample({{"kind", "background"}}, D(h.background_bytes));
  e->Gauge("pcrfs_remote_requests_in_flight", "Remote requests in flight.", D(h.in_flight));
  e->Family("pcrfs_remote_request_duration_seconds", Type::kHistogram,
            "Time of whole remote requests, from the first try to the answer.");
  e->HistogramSample({}, MsBuckets(h.latency, h.latency_sum_us));
  e->Family("pcrfs_remote_first_byte_seconds", Type::kHistogram,
            "Time from a successful try's start to the response's first byte.");
  e->HistogramSample({}, MsBuckets(h.first_byte_latency, h.first_byte_sum_us));
  e->Family("pcrfs_remote_retries_total", Type::kCounter, "Tries retried, by reason.");
  for (size_t i = 0; i < h.retries.size(); ++i) {
    e->Sample({{"reason", RetryReasonName(static_cast<RetryReason>(i))}}, D(h.retries[i]));
  }
  e->Family("pcrfs_remote_request_failures_total", Type::kCounter,
            "Remote requests that failed, by reason and HTTP status (empty: none).");
  for (const auto& [reason, n] : h.failed_by_reason) {
    e->Sample({{"reason", reason}, {"status", StatusOf(reason)}}, D(n));
  }

  // The authority: {"source":...,"expires":...,"renewals":...}; never a secret.
  const nlohmann::json auth = nlohmann::json::parse(client.DescribeAuthJson(), nullptr, false);
  if (auth.is_object()) {
    // The kind of source only: "profile P (FILE)" and the like name a file after " (", and a
    // label never carries a file name.
    std::string source = auth.value("source", std::string("unknown"));
    source = source.substr(0, source.find(" ("));
    e->Family("pcrfs_credentials_info", Type::kGauge,
              "Where the remote store's authority comes from (1 for the current source).");
    e->Sample({{"source", source}}, 1);
    if (auth.contains("expires") && auth["expires"].is_string()) {
      if (auto t = ParseIso8601(auth["expires"].get<std::string>())) {
        e->Gauge("pcrfs_credentials_expiry_timestamp_seconds",
                 "When the current credentials expire (Unix time).",
                 std::chrono::duration<double>(t->time_since_epoch()).count());
      }
    }
    if (auth.contains("renewals") && auth["renewals"].is_number()) {
      e->Counter("pcrfs_credentials_renewals_total", "Credential renewals that succeeded.",
                 auth["renewals"].get<double>());
    }
    if (auth.contains("renewal_failures") && auth["renewal_failures"].is_number()) {
      e->Counter("pcrfs_credentials_renewal_failures_total", "Credential renewals that failed.",
                 auth["renewal_failures"].get<double>());
    }
  }

  if (cache == nullptr) return;
  const RangeCacheStats c = cache->stats();
  e->Family("pcrfs_range_cache_hit_bytes_total", Type::kCounter,
            "Remote record bytes served from the range cache, by tier.");
  e->Sample({{"tier", "memory"}}, D(c.memory_hit_bytes));
  e->Sample({{"tier", "disk"}}, D(c.disk_hit_bytes));
  e->Counter("pcrfs_range_cache_miss_bytes_total",
             "Remote record bytes asked for that the range cache did not hold.", D(c.miss_bytes));
  e->Counter("pcrfs_range_cache_inserted_bytes_total", "Bytes put into the range cache.",
             D(c.inserted_bytes));
  e->Counter("pcrfs_range_cache_evicted_bytes_total", "Bytes evicted from the range cache.",
             D(c.evicted_bytes));
  e->Counter("pcrfs_range_cache_damaged_extents_total",
             "Range cache extents dropped because a piece in them failed its checksum.",
             D(c.dropped));
  e->Family("pcrfs_range_cache_bytes", Type::kGauge, "Bytes the range cache holds, by tier.");
  e->Sample({{"tier", "memory"}}, D(c.memory_bytes));
  e->Sample({{"tier", "disk"}}, D(c.disk_bytes));
  e->Gauge("pcrfs_range_cache_unread_speculative_bytes",
           "Bytes fetched ahead of the readers and not read yet.", D(c.unread_speculative_bytes));
  e->Counter("pcrfs_range_cache_evicted_unread_bytes_total",
             "Bytes fetched ahead and evicted before anybody read them (fetched for nothing).",
             D(c.evicted_unread_bytes));
}

std::string Response(std::string_view status, std::string_view type, const std::string& body,
                     bool head, std::string_view extra = "") {
  std::string r = "HTTP/1.1 ";
  r += status;
  r += "\r\nContent-Type: ";
  r += type;
  r += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n";
  r += extra;
  r += "\r\n";
  if (!head) r += body;
  return r;
}

}  // namespace

std::string RenderMountMetrics(const MetricsSources& s, const metrics::Labels& labels) {
  metrics::Exposition e(labels);
  e.Family("pcrfs_build_info", Type::kGauge, "The pcrfs version serving the mount (always 1).");
  e.Sample({{"version", PCRFS_VERSION}}, 1);
  e.Gauge("pcrfs_start_time_seconds", "When the daemon started (Unix time).",
          std::chrono::duration<double>(kProcessStart.time_since_epoch()).count());
  e.Gauge("pcrfs_mount_level", "The level served at the root (0: scan1..scan10 folders).", s.level);
  e.Gauge("pcrfs_resident_memory_bytes", "The daemon's resident memory (/proc/self/statm).",
          D(proc::ResidentBytes()));
  e.Gauge("pcrfs_resident_file_bytes",
          "Of the resident memory, file-backed pages (the mapped index, libraries).",
          D(proc::ResidentFileBytes()));
  // glibc's books over every arena: what the daemon holds, and what it freed and malloc kept
  // (the heap trimmer returns the latter's whole pages: common/heap_trimmer.h). Resident
  // memory well above in_use + the caches' files is fragmentation, not live data.
  const struct mallinfo2 heap = mallinfo2();
  e.Family("pcrfs_heap_bytes", Type::kGauge,
           "The daemon's heap by glibc's books: in_use (allocated, mmapped chunks included) or "
           "free (kept by malloc; the trimmer returns its whole pages).");
  e.Sample({{"state", "in_use"}}, D(heap.uordblks + heap.hblkhd));
  e.Sample({{"state", "free"}}, D(heap.fordblks));
  e.Counter("pcrfs_heap_trims_total", "Times the heap's free pages were returned (malloc_trim).",
            D(HeapTrimmer::ProcessTrims()));
  e.Counter("pcrfs_heap_trim_seconds_total", "Time the heap's trims took.",
            HeapTrimmer::ProcessTrimSeconds());
  AppendFuseMetrics(&e);
  if (s.fs != nullptr) {
    AppendServed(*s.fs, &e);
    AppendStore(*s.fs, &e);
  }
  if (s.client != nullptr) AppendRemote(*s.client, s.cache, &e);
  return e.text();
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Listen(const std::string& address) {
  const std::string what = "-o metrics=" + address;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Err(Status::InvalidArgument(what + ": no port"));
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Err(Status::InvalidArgument(what + ": " + ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  UniqueFd fd(::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                       found->ai_protocol));
  if (!fd.valid()) return Err(Status::FromErrno(what + ": cannot listen", errno));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
    return Err(Status::FromErrno(what + ": cannot listen", errno));
  }
  sockaddr_storage bound;
  socklen_t len = sizeof bound;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return Err(Status::FromErrno(what + ": cannot listen", errno));
  }
  char name[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, name, sizeof name, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return Err(Status::InvalidArgument(what + ": cannot name the bound address"));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Err(Status::FromErrno(what + ": pipe", errno));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer);
  server->listen_fd_ = std::move(fd);
  server->wake_read_ = UniqueFd(pipe_fds[0]);
  server->wake_write_ = UniqueFd(pipe_fds[1]);
  const std::string shown(name);
  server->address_ =
      (shown.find(':') != std::string::npos ? "[" + shown + "]" : shown) + ":" + serv;
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Start(std::function<std::string()> render) {
  if (thread_.joinable()) return;
  render_ = std::move(render);
  thread_ = std::thread([this] { Run(); });
}

void MetricsServer::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  [[maybe_unused]] const ssize_t n = ::write(wake_write_.get(), &byte, 1);
  thread_.join();
}

// One connection of the server: reading the request head, writing the reply, then reading what
// the client still sends until it closes (closing with unread bytes would reset the
// connection, and the client might lose the reply).
struct MetricsServer::Conn {
  enum class Phase { kReading, kWriting, kDraining };
  UniqueFd fd;
  Phase phase = Phase::kReading;
  Clock::time_point deadline;
  std::string data;  // the request head so far, then the reply
  size_t done = 0;   // reply bytes sent, then bytes drained
};

void MetricsServer::Run() {
  NameThisThread("pcrfs-metrics");
  std::vector<Conn> conns;
  std::vector<pollfd> p;
  Clock::time_point accept_again{};  // after EMFILE or ENFILE: not before
  bool out_of_fds_logged = false;
  for (;;) {
    const Clock::time_point now = Clock::now();
    p.clear();
    p.push_back({wake_read_.get(), POLLIN, 0});
    p.push_back({now >= accept_again ? listen_fd_.get() : -1, POLLIN, 0});
    Clock::time_point next = now + std::chrono::hours(1);
    if (now < accept_again) next = accept_again;
    for (const Conn& c : conns) {
      p.push_back(
          {c.fd.get(), static_cast<short>(c.phase == Conn::Phase::kWriting ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    const int n =
        ::poll(p.data(), p.size(), static_cast<int>(std::clamp<int64_t>(wait + 1, 0, 3600000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, "metrics server: poll: " + std::string(std::strerror(errno)));
      return;
    }
    if (p[0].revents != 0) return;
    // The connections first (the vector may grow below, and p[i + 2] is conns[i]).
    for (size_t i = 0; i < conns.size(); ++i) {
      if (p[i + 2].revents != 0) Step(&conns[i]);
    }
    const Clock::time_point after = Clock::now();
    std::erase_if(conns, [&](const Conn& c) { return !c.fd.valid() || after >= c.deadline; });
    if ((p[1].revents & POLLIN) == 0) continue;
    for (;;) {  // every pending connection: the listening socket does not block
      UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn.valid()) {
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: the pending connection stays queued and poll would fire again
          // at once; try again a little later.
          accept_again = after + kAcceptBackoff;
          if (!out_of_fds_logged) {
            Log(LogLevel::kWarning,
                "metrics server: accept: " + std::string(std::strerror(errno)) + "; retrying");
            out_of_fds_logged = true;
          }
        }
        break;  // EAGAIN: none left; ECONNABORTED and the like: the client went away
      }
      out_of_fds_logged = false;
      // Beyond the cap a connection is closed at once: idle ones cannot crowd out a scrape
      // for longer than their deadline, and never hold more than kMaxConnections descriptors.
      if (conns.size() >= kMaxConnections) continue;
      Conn c;
      c.fd = std::move(conn);
      c.deadline = after + kRequestTimeout;
      conns.push_back(std::move(c));
    }
  }
}

void MetricsServer::Step(Conn* c) {
  char buf[4096];
  if (c->phase == Conn::Phase::kReading) {
    const ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      c->fd.Reset();
      return;
    }
    c->data.append(buf, static_cast<size_t>(n));
    const bool complete =
        c->data.find("\r\n\r\n") != std::string::npos || c->data.find("\n\n") != std::string::npos;
    if (!complete && c->data.size() <= kMaxRequestBytes) return;
    c->data = Reply(complete ? c->data : std::string());
    c->done = 0;
    c->phase = Conn::Phase::kWriting;
    c->deadline = Clock::now() + kRequestTimeout;  // for the reply, however long the head took
  }
  if (c->phase == Conn::Phase::kWriting) {
    while (c->done < c->data.size()) {
      const ssize_t n =
          ::send(c->fd.get(), c->data.data() + c->done, c->data.size() - c->done, MSG_NOSIGNAL);
      if (n > 0) {
        c->done += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;  // POLLOUT next
      } else {
        c->fd.Reset();
        return;
      }
    }
    ::shutdown(c->fd.get(), SHUT_WR);
    c->data.clear();
    c->data.shrink_to_fit();
    c->done = 0;
    c->phase = Conn::Phase::kDraining;
    c->deadline = std::min(c->deadline, Clock::now() + std::chrono::seconds(1));
    return;
  }
  // Draining, briefly and at most 1 MiB.
  for (;;) {
    const ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0 || (c->done += static_cast<size_t>(n)) >= (1u << 20)) {
      c->fd.Reset();
      return;
    }
  }
}

std::string MetricsServer::Reply(const std::string& request) {
  const std::string_view text = "text/plain; charset=utf-8";
  if (request.empty()) {
    return Response("431 Request Header Fields Too Large", text, "request too large\n", false);
  }
  // "METHOD TARGET VERSION"
  const std::string_view line(request.data(), request.find_first_of("\r\n"));
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1 || line.substr(sp2 + 1, 5) != "HTTP/") {
    return Response("400 Bad Request", text, "bad request\n", false);
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    return Response("405 Method Not Allowed", text, "only GET and HEAD\n", false,
                    "Allow: GET, HEAD\r\n");
  }
  if (target != "/metrics") {
    return Response("404 Not Found", text, "pcrfs serves its metrics at /metrics\n", head);
  }
  std::string body;
  try {
    body = render_();
  } catch (const std::exception& e) {
    if (!render_failed_) Log(LogLevel::kError, std::string("metrics server: ") + e.what());
    render_failed_ = true;
    return Response("500 Internal Server Error", text, "the metrics could not be rendered\n", head);
  } catch (...) {
    if (!render_failed_) Log(LogLevel::kError, "metrics server: rendering failed");
    render_failed_ = true;
    return Response("500 Internal Server Error", text, "the metrics could not be rendered\n", head);
  }
  render_failed_ = false;
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head);
}

MetricsFileWriter::MetricsFileWriter(std::string path, std::chrono::seconds interval,
                                     std::function<std::string()> render)
    : path_(std::move(path)), interval_(interval), render_(std::move(render)) {
  thread_ = std::thread([this] { Run(); });
}

MetricsFileWriter::~MetricsFileWriter() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void MetricsFileWriter::Run() {
  NameThisThread("pcrfs-metricsf");
  bool failing = false;
  MutexLock l(&mu_);
  while (!stop_) {
    l.Unlock();
    const Status s = WriteOnce();
    if (!s.ok() && !failing) Log(LogLevel::kError, "-o metrics_file: " + s.message());
    failing = !s.ok();
    l.Lock();
    cv_.WaitFor(&mu_, interval_, [this]() REQUIRES(mu_) { return stop_; });
  }
  l.Unlock();
  // Once more as the mount ends: the file keeps the final counts.
  const Status s = WriteOnce();
  if (!s.ok() && !failing) Log(LogLevel::kError, "-o metrics_file: " + s.message());
}

Status MetricsFileWriter::WriteOnce() {
  std::string text;
  try {
    text = render_();
  } catch (const std::exception& e) {  // the file keeps the last counts written
    return Status::IOError(path_ + ": the metrics could not be rendered: " + e.what());
  } catch (...) {
    return Status::IOError(path_ + ": the metrics could not be rendered");
  }
  return WriteFileAtomic(path_, text.data(), text.size());
}

}  // namespace pcrfs::fs
