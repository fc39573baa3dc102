#include "remote/renewing_credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "common/log.h"
#include "common/thread_name.h"
#include "remote/credential_process.h"

namespace pcrfs {

Clock::duration RenewalMargin(Clock::duration lifetime) {
  return std::max(Clock::duration::zero(),
                  std::min<Clock::duration>(std::chrono::minutes(10), lifetime / 4));
}

Clock::duration RenewalBackoff(int failures) {
  if (failures <= 1) return std::chrono::seconds(1);
  if (failures >= 7) return std::chrono::seconds(60);  // 1 << 6 = 64 > 60
  return std::min<Clock::duration>(std::chrono::seconds(int64_t{1} << (failures - 1)),
                                   std::chrono::seconds(60));
}

std::optional<Clock::time_point> NextRenewal(const RenewalTimes& t, double jitter) {
  if (!t.expiration) return std::nullopt;
  const Clock::time_point expiration = *t.expiration;
  if (t.failures > 0) {
    Clock::time_point next = t.last_failure + RenewalBackoff(t.failures);
    // While the credentials still work, the last try is at their expiration; after that, the
    // backoff alone (min with a past expiration would retry in a tight loop).
    if (expiration > t.last_failure) next = std::min(next, expiration);
    return next;
  }
  const Clock::duration margin = RenewalMargin(expiration - t.obtained);
  jitter = std::clamp(jitter, 0.0, 1.0);
  const auto spread = std::chrono::duration_cast<Clock::duration>(margin * (jitter / 10));
  return expiration - margin - spread;
}

RenewingCredentials::RenewingCredentials(CredentialProvider provider, FetchedCredentials first,
                                         Options options)
    : provider_(std::move(provider)),
      clock_(options.clock != nullptr ? options.clock : timing::Clock::Real()),
      now_(options.now ? std::move(options.now) : [clock = clock_] { return clock->WallNow(); }),
      jitter_(options.jitter ? std::move(options.jitter) : [] {
        thread_local std::mt19937_64 rng(std::random_device{}());
        return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      }) {
  MutexLock l(&mu_);
  stamps_ = StampFiles();
  Install(std::move(first), /*count_renewal=*/false);
}

RenewingCredentials::~RenewingCredentials() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (!thread_.joinable()) return;
  if (thread_pid_ == ::getpid()) {
    thread_.join();
  } else {
    // Started before a fork: the thread does not exist in this process; joining would wait
    // forever. Its handle is left alone (std::thread's destructor would terminate).
    new std::thread(std::move(thread_));
  }
}

Status RenewingCredentials::StartRenewal() {
  if (thread_.joinable()) {
    if (thread_pid_ == ::getpid()) return Status::OK();
    return Status::InvalidArgument(
        "credential renewal was started before fork(): start it in the process that signs");
  }
  thread_pid_ = ::getpid();
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

std::shared_ptr<const AwsCredentialsSnapshot> RenewingCredentials::Current() const {
  MutexLock l(&mu_);
  return snapshot_;
}

RenewalTimes RenewingCredentials::times() const {
  MutexLock l(&mu_);
  return times_;
}

std::optional<Clock::time_point> RenewingCredentials::next_renewal() const {
  MutexLock l(&mu_);
  return NextRenewal(times_, schedule_jitter_);
}

std::vector<RenewingCredentials::FileStamp> RenewingCredentials::StampFiles() const {
  std::vector<FileStamp> stamps;
  for (const auto& path : provider_.watched_files) {
    FileStamp s;
    struct stat st;
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) {
      s.exists = true;
      s.dev = st.st_dev;
      s.ino = st.st_ino;
      s.size = static_cast<uint64_t>(st.st_size);
      s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    }
    stamps.push_back(s);
  }
  return stamps;
}

bool RenewingCredentials::Install(FetchedCredentials fetched, bool count_renewal) {
  const uint64_t generation = snapshot_ ? snapshot_->generation : 0;
  if (snapshot_ && provider_.kind == CredentialProvider::Kind::kFile &&
      snapshot_->credentials.access_key_id() == fetched.credentials.access_key_id() &&
      snapshot_->credentials.secret_access_key() == fetched.credentials.secret_access_key() &&
      snapshot_->credentials.session_token() == fetched.credentials.session_token()) {
    return false;  // the file was rewritten with the same keys
  }
  auto next = std::make_shared<AwsCredentialsSnapshot>();
  next->credentials = std::move(fetched.credentials);
  next->expiration = fetched.expiration;
  next->generation = generation + 1;
  next->source = std::move(fetched.source);
  snapshot_ = std::move(next);
  times_ = RenewalTimes{now_(), fetched.expiration, 0, {}};
  schedule_jitter_ = jitter_();
  if (count_renewal) ++renewals_;
  return true;
}

void RenewingCredentials::RecordFailure(const Status& s) {
  ++renewal_failures_;
  ++times_.failures;
  times_.last_failure = now_();
  const std::string& m = s.message();
  Log(LogLevel::kWarning, "credential renewal failed: " + OneLine(m, 400));
  const size_t said = m.find(kCredentialProcessSaid);
  last_error_ =
      OneLine(said == std::string::npos ? m : m.substr(0, said) + " (more in the log)", 400);
}

Status RenewingCredentials::RenewNow() {
  MutexLock fetch(&fetch_mu_);
  {
    MutexLock l(&mu_);
    renewing_ = true;
    renew_requested_ = false;
  }
  std::vector<FileStamp> stamps = StampFiles();  // before reading: a later write is noticed
  auto fetched = provider_.fetch(/*files_only=*/false);
  MutexLock l(&mu_);
  renewing_ = false;
  if (!fetched) {
    RecordFailure(fetched.error());
    return fetched.error();
  }
  stamps_ = std::move(stamps);
  if (!Install(std::move(*fetched), /*count_renewal=*/true)) {
    // Same keys again: still a renewal done; the schedule restarts.
    ++renewals_;
    times_.failures = 0;
  }
  last_error_.clear();
  return Status::OK();
}

bool RenewingCredentials::FileKeysChanged() const {
  std::vector<FileStamp> stamps = StampFiles();
  {
    MutexLock l(&mu_);
    if (stamps == stamps_) return false;
  }
  auto* self = const_cast<RenewingCredentials*>(this);
  MutexLock fetch(&self->fetch_mu_);
  auto fetched = provider_.fetch(/*files_only=*/true);
  MutexLock l(&self->mu_);
  if (!fetched) {
    if (fetched.error().code() == Status::Code::kNotSupported) {
      // The profile now needs a process or STS: that is the thread's work.
      self->renew_requested_ = true;
      cv_.SignalAll();
      return true;
    }
    self->RecordFailure(fetched.error());
    self->stamps_ = std::move(stamps);  // the same broken file is not read again and again
    return false;
  }
  self->stamps_ = std::move(stamps);
  self->last_error_.clear();
  return self->Install(std::move(*fetched), /*count_renewal=*/true);
}

bool RenewingCredentials::RequestRenewal(uint64_t generation) const {
  switch (provider_.kind) {
    case CredentialProvider::Kind::kFixed:
      return false;
    case CredentialProvider::Kind::kFile:
      return FileKeysChanged();
    case CredentialProvider::Kind::kFetched:
      break;
  }
  MutexLock l(&mu_);
  if (generation != snapshot_->generation || renewing_ || renew_requested_) return true;
  // Credentials a renewal got moments ago, refused still (a wrong key, a clock the server
  // disagrees with): another renewal would not help, and each refusal would start one.
  if (snapshot_->generation > 1 && now_() - times_.obtained < kRefusedAfterRenewal) return false;
  renew_requested_ = true;
  cv_.SignalAll();
  return true;
}

void RenewingCredentials::Reload() const {
  switch (provider_.kind) {
    case CredentialProvider::Kind::kFixed:
      return;
    case CredentialProvider::Kind::kFile:
      FileKeysChanged();
      return;
    case CredentialProvider::Kind::kFetched: {
      MutexLock l(&mu_);
      renew_requested_ = true;
      cv_.SignalAll();
      return;
    }
  }
}

std::string RenewingCredentials::DescribeJson() const {
  MutexLock l(&mu_);
  nlohmann::json j;
  j["source"] = snapshot_->source;
  j["access_key_id"] = MaskedKeyId(snapshot_->credentials.access_key_id());
  if (snapshot_->expiration) j["expires"] = FormatIso8601(*snapshot_->expiration);
  j["generation"] = snapshot_->generation;
  j["renewals"] = renewals_;
  j["renewal_failures"] = renewal_failures_;
  if (!last_error_.empty()) j["last_error"] = last_error_;
  if (auto next = NextRenewal(times_, schedule_jitter_)) j["next_renewal"] = FormatIso8601(*next);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RenewingCredentials::Run() {
  NameThisThread("pcrfs-creds");
  MutexLock l(&mu_);
  while (!stop_) {
    auto next = NextRenewal(times_, schedule_jitter_);
    const auto now = now_();
    if (renew_requested_) {
      // A refused request asks for a renewal now, but after failures not before their backoff
      // (refusals must not turn failing fetches into a storm).
      const auto allowed =
          times_.failures > 0 ? times_.last_failure + RenewalBackoff(times_.failures) : now;
      next = next ? std::min(*next, allowed) : allowed;
    }
    const bool due = next && *next <= now;
    if (!due) {
      // Wait on the steady clock for the wall clock's distance, at most a minute: a suspended
      // machine or a clock step is noticed within a minute.
      Clock::duration wait = std::chrono::minutes(1);
      if (next) wait = std::min(wait, *next - now);
      clock_->WaitFor(&cv_, &mu_, wait);
      continue;
    }
    l.Unlock();
    Status s = RenewNow();
    (void)s;  // counted and kept for DescribeJson by RenewNow
    l.Lock();
  }
}

}  // namespace pcrfs
