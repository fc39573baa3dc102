// RenewingCredentials: the AWS credentials the chain resolved (remote/aws_credentials.h), kept
// fresh by a background thread that renews temporary ones before they expire, and the renewal
// schedule, pure functions of the times so that tests feed them timelines exactly.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "remote/aws_credential_parsers.h"
#include "remote/aws_credential_source.h"

namespace pcrfs {

// How long before expiration to renew credentials that live `lifetime`: min(10 min, lifetime/4).
Clock::duration RenewalMargin(Clock::duration lifetime);
// Wait before retrying after `failures` failed renewals in a row (>= 1): 1 s doubling, at most
// 60 s.
Clock::duration RenewalBackoff(int failures);

struct RenewalTimes {
  Clock::time_point obtained;                   // when the current credentials were fetched
  std::optional<Clock::time_point> expiration;  // theirs; nullopt: long-term
  int failures = 0;                             // renewals failed in a row since `obtained`
  Clock::time_point last_failure;               // when the last of those failed
};

// When to renew next; nullopt: never on a timer (long-term credentials). Without failures:
// expiration - margin - jitter * margin / 10 (jitter in [0, 1), spreading the renewals of many
// mounts). After failures: last_failure + RenewalBackoff(failures), but not later than the
// expiration while it is ahead (once expired, the backoff alone). A result in the past means now.
std::optional<Clock::time_point> NextRenewal(const RenewalTimes& times, double jitter);

// One way of getting credentials, found by the chain and kept for renewals.
struct CredentialProvider {
  enum class Kind {
    kFixed,    // the environment's keys: nothing to renew
    kFile,     // static keys from the profile's files: read again when the files change
    kFetched,  // from STS, a process or a metadata service: fetched again to renew
  };
  Kind kind = Kind::kFixed;
  // Fetches the credentials now (blocking: network, process, files). For kFile, `files_only`
  // fetches reading the files only: a profile that now needs more fails.
  std::function<Result<FetchedCredentials>(bool files_only)> fetch;
  // kFile: the files whose change (inode, size, mtime) means the keys may have changed.
  std::vector<std::string> watched_files;
};

// AWS credentials that stay valid: the current ones are a snapshot read without blocking; a
// background thread renews temporary ones before they expire.
//
// Lifetimes and threads:
//  - ResolveAwsCredentials() makes it with the first credentials and NO thread: the daemon
//    resolves before it forks (so a failure is reported in the foreground), and threads do
//    not survive fork(). Call StartRenewal() in the process that uses the credentials, after
//    any fork; until then nothing renews on a timer (RequestRenewal of keys from a file still
//    works; other renewals wait for the thread).
//  - Current(), RequestRenewal(), Reload(), DescribeJson() are thread-safe and never block on
//    the network or a process (RequestRenewal of file keys reads the small files).
//  - The destructor stops and joins the thread. It must not run on that thread.
//
// Renewal: at NextRenewal(); a failure keeps the old credentials (they may still work), counts,
// keeps its message for DescribeJson, and is retried with RenewalBackoff.
class RenewingCredentials final : public AwsCredentialSource {
 public:
  struct Options {
    std::function<Clock::time_point()> now;  // nullptr: clock's WallNow()
    // What the renewal thread waits on, and the time without `now` (nullptr: the real clocks).
    // A timing::FakeClock makes the thread renew exactly when the test advances it past the
    // schedule (aws_credentials_test.cc), with no sleep.
    const timing::Clock* clock = nullptr;
    // Jitter in [0, 1) for each new schedule; nullptr: random.
    std::function<double()> jitter;
  };
  RenewingCredentials(CredentialProvider provider, FetchedCredentials first, Options options);
  ~RenewingCredentials() override;
  RenewingCredentials(const RenewingCredentials&) = delete;
  RenewingCredentials& operator=(const RenewingCredentials&) = delete;

  // Starts the renewal thread ("pcrfs-creds"). Idempotent in one process. Error if it was
  // started in another process (before a fork): that thread does not exist here.
  Status StartRenewal();

  std::shared_ptr<const AwsCredentialsSnapshot> Current() const override;
  // kFixed: false. kFile: stats the files; if they changed, reads them again now and returns
  // true if the keys changed (false if not; a profile that now needs a process or STS wakes the
  // thread and returns true). kFetched: true, waking the thread to renew now unless a renewal
  // is running or queued, or `generation` is no longer current (a newer one exists already).
  // After failed renewals the thread waits for RenewalBackoff all the same. false also when
  // the current credentials came from a renewal less than kRefusedAfterRenewal ago: they are
  // refused anyway, the request fails (no renewal per refusal).
  bool RequestRenewal(uint64_t generation) const override;
  static constexpr Clock::duration kRefusedAfterRenewal = std::chrono::seconds(10);
  // SIGHUP: kFile as RequestRenewal; kFetched renews now on the thread. kFixed: nothing.
  void Reload() const override;
  std::string DescribeJson() const override;

  // One renewal on the calling thread, as the thread does it (blocking). For tests and tools
  // that never start the thread. Returns the fetch's error, which is also counted.
  Status RenewNow();

  CredentialProvider::Kind kind() const { return provider_.kind; }
  // The schedule's inputs now (for tests and DescribeJson).
  RenewalTimes times() const;
  // When the thread means to renew next (NextRenewal of times() with this schedule's jitter).
  std::optional<Clock::time_point> next_renewal() const;

 private:
  struct FileStamp {
    bool exists = false;
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  std::vector<FileStamp> StampFiles() const;
  // Installs `fetched` as a new generation (or nothing when kFile's keys did not change: returns
  // false then).
  bool Install(FetchedCredentials fetched, bool count_renewal) REQUIRES(mu_);
  void RecordFailure(const Status& s) REQUIRES(mu_);
  bool FileKeysChanged() const;
  void Run();

  const CredentialProvider provider_;
  const timing::Clock* const clock_;
  const std::function<Clock::time_point()> now_;
  const std::function<double()> jitter_;

  mutable Mutex mu_;
  mutable CondVar cv_;
  std::shared_ptr<const AwsCredentialsSnapshot> snapshot_ GUARDED_BY(mu_);
  RenewalTimes times_ GUARDED_BY(mu_);
  double schedule_jitter_ GUARDED_BY(mu_) = 0;
  std::vector<FileStamp> stamps_ GUARDED_BY(mu_);
  uint64_t renewals_ GUARDED_BY(mu_) = 0;
  uint64_t renewal_failures_ GUARDED_BY(mu_) = 0;
  std::string last_error_ GUARDED_BY(mu_);
  mutable bool renew_requested_ GUARDED_BY(mu_) = false;
  bool renewing_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  // Serializes fetches (the thread's, RenewNow's, RequestRenewal's file re-reads).
  mutable Mutex fetch_mu_ ACQUIRED_BEFORE(mu_);
  std::thread thread_;
  pid_t thread_pid_ = 0;  // the process that started thread_
};

}  // namespace pcrfs
