// Files: aws_credentials.cc (the chain, its parsers and RenewingCredentials),
// aws_metadata_credentials.cc (the container and instance metadata sources),
// credential_process.h (the helper runner), aws_chain.h (what those files share).
//
// The AWS credential chain, resolved the way botocore resolves it (botocore is the judge:
// docs in /work/shared/DESIGN.md section 8), and RenewingCredentials, which keeps temporary
// credentials fresh in the background.
//
// The chain, first hit wins (botocore's provider order):
//  1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN). Long-term.
//     Skipped when options.profile names a profile (-o profile), as botocore skips it for
//     Session(profile=...) and the CLI's --profile; not for AWS_PROFILE.
//  2. assume role from the profile: `role_arn` with `source_profile` (resolved recursively;
//     a profile may name itself as source when it holds static keys) or `credential_source`
//     (Environment, Ec2InstanceMetadata, EcsContainer); STS AssumeRole signed with SigV4 by
//     the source's credentials. `role_session_name`, `external_id`, `duration_seconds` are
//     honoured. A profile with `web_identity_token_file` is left to step 3.
//  3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE (else the profile's web_identity_token_file),
//     AWS_ROLE_ARN (else role_arn), AWS_ROLE_SESSION_NAME (else role_session_name, else
//     "pcrfs-<unix time>"): STS AssumeRoleWithWebIdentity, unsigned. The token file is read
//     again at every renewal (EKS rotates it).
//  4. the profile's static keys in the credentials file, then `credential_process`, then static
//     keys in the config file.
//  5. container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (at http://169.254.170.2) or
//     AWS_CONTAINER_CREDENTIALS_FULL_URI (http only to a loopback address or the ECS/EKS link
//     local ones; https anywhere), with `Authorization` from the file
//     AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every renewal) or
//     AWS_CONTAINER_AUTHORIZATION_TOKEN.
//  6. EC2 instance metadata, IMDSv2 (IMDSv1 when the token PUT answers 403/404/405, as
//     botocore); skipped with AWS_EC2_METADATA_DISABLED=true; endpoint
//     AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254. A 1 s connect timeout: a
//     machine without IMDS gets its answer within about 2 s.
//
// The profile: options.profile, else AWS_PROFILE, else "default". Files: options, else
// AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE, else HOME/.aws/credentials and HOME/.aws/config
// (HOME: the variable, else the password database's home of the effective user: mount(8) runs
// helpers without HOME). Sections: "[NAME]" in the credentials file, "[profile NAME]" (or
// "[default]") in the config file; the credentials file's values win, as botocore merges them.
// STS: AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com with
// AWS_STS_REGIONAL_ENDPOINTS=regional, else https://sts.amazonaws.com (botocore 1.29's default);
// it signs for options.region, else AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
// us-east-1.
//
// Errors are one line and never hold a secret, a session token, a web identity token or a
// credential_process's stdout. Its stderr's first line (that is where it explains) is shown
// when the mount fails; a failed renewal's goes to the log only, not to DescribeJson.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "remote/aws_config_files.h"
#include "remote/aws_credential_source.h"
#include "remote/credential_process.h"
#include "remote/simple_http.h"

namespace pcrfs {

struct AwsCredentialOptions {
  std::string profile;           // empty: AWS_PROFILE, else "default"
  std::string credentials_file;  // empty: AWS_SHARED_CREDENTIALS_FILE, else HOME/.aws/credentials
  std::string config_file;       // empty: AWS_CONFIG_FILE, else HOME/.aws/config
  bool no_sign = false;          // anonymous: ResolveAwsCredentials returns nullptr
  std::string region;            // STS's signing region; empty: see above
};

using Clock = std::chrono::system_clock;

// What the chain reaches outside the process, all injectable so tests run without sockets,
// processes or the real environment. Each nullptr means the real thing.
struct AwsCredentialDeps {
  EnvLookup env;                                                             // getenv
  std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)> http;  // SimpleHttp
  // credential_process: runs `command` (split by SplitCommandLine, no shell) and returns its
  // stdout; errors name the exit status and the first line of stderr, never stdout. Real one:
  // RunCredentialProcess with a 60 s deadline.
  std::function<Result<std::string>(const std::string& command)> run_process;
  std::function<Clock::time_point()> now;  // the system clock
  std::function<std::string()> home;       // $HOME, else getpwuid(geteuid())->pw_dir
};

// Credentials as one provider returns them.
struct FetchedCredentials {
  Credentials credentials;
  std::optional<Clock::time_point> expiration;  // nullopt: long-term
  std::string source;                           // AwsCredentialsSnapshot::source
};

// ---- The parsers, public for tests and the fuzz target (tests/fuzz/aws_credentials_fuzzer.cc).
// Each takes hostile text (a server's or a process's answer) and fails with Corruption in one
// line that never quotes the text.

// "2026-11-27T12:00:00Z", with fractional seconds, "+00:00" or "-05:30" offsets.
Result<Clock::time_point> ParseIso8601(std::string_view text);
// "2026-11-27T12:00:00Z".
std::string FormatIso8601(Clock::time_point t);
// An STS answer: <...Result><Credentials><AccessKeyId>..</AccessKeyId><SecretAccessKey>..
// <SessionToken>..<Expiration>..</Credentials>. An <Error><Code>C</Code><Message>M</Message>
// answer is InvalidArgument "C: M" (printable, capped at 200 characters).
Result<FetchedCredentials> ParseStsCredentials(std::string_view xml);
// credential_process's stdout: {"Version": 1, "AccessKeyId", "SecretAccessKey",
// "SessionToken"?, "Expiration"?}.
Result<FetchedCredentials> ParseProcessCredentials(std::string_view json);
// The container endpoint's and IMDS's JSON: "AccessKeyId", "SecretAccessKey", "Token",
// "Expiration" (IMDS adds "Code": "Success"; another Code is an error).
Result<FetchedCredentials> ParseMetadataCredentials(std::string_view json);

// ---- The renewal schedule: pure functions of the times, so tests feed them timelines exactly.

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

// Resolves the chain once (blocking) and returns its credentials, ready to renew (no thread
// yet: see StartRenewal). options.no_sign: nullptr (anonymous), nothing resolved.
// Errors, one line:
//  - NotFound when no source has credentials, naming each source and why it had none:
//    "no AWS credentials: environment (AWS_ACCESS_KEY_ID unset), profile 'default' (not in
//    /root/.aws/credentials or /root/.aws/config), web identity (AWS_WEB_IDENTITY_TOKEN_FILE
//    unset), container (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset), instance
//    metadata (http://169.254.169.254: Connection refused)". Callers put the store's URL first.
//  - InvalidArgument for a configuration botocore refuses too: a key id without a secret, a
//    profile named explicitly (option or AWS_PROFILE) that exists in neither file (both named),
//    a source_profile loop or absent source profile, role_arn without source_profile or
//    credential_source (or with both), an unknown credential_source, a FULL_URI to a host that
//    is not allowed.
//  - the failing source's error when a source that is configured fails: STS's answer ("role
//    ARN: AccessDenied: ..."), a credential_process exit status, a container endpoint's status,
//    an unreadable token file.
Result<std::shared_ptr<RenewingCredentials>> ResolveAwsCredentials(
    const AwsCredentialOptions& options, AwsCredentialDeps deps = {});

}  // namespace pcrfs
