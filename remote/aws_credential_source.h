// Where the SigV4 signer gets AWS credentials from: the current ones, never blocking, and a way
// to ask for new ones. remote/aws_credentials.h resolves the AWS credential chain and renews
// what it found in the background (RenewingCredentials); StaticCredentialSource is a fixed key.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "remote/credentials.h"

namespace pcrfs {

struct AwsCredentialsSnapshot {
  Credentials credentials;
  // When temporary credentials stop working; nullopt for long-term keys.
  std::optional<std::chrono::system_clock::time_point> expiration;
  // Increases by one each time the credentials change (the first ones are 1).
  uint64_t generation = 0;
  // Where they came from: "environment", "web identity", "profile train (credential_process)",
  // "container", "instance metadata", ...
  std::string source;
};

class AwsCredentialSource {
 public:
  virtual ~AwsCredentialSource() = default;
  // The credentials to sign with now; nullptr when there are none (yet). Never blocks on the
  // network or a process. Thread-safe.
  virtual std::shared_ptr<const AwsCredentialsSnapshot> Current() const = 0;
  // A server refused credentials of `generation`: renew now unless a renewal is running or
  // the current generation is newer. Returns false when renewing cannot help (long-term keys
  // from a source that has not changed). Never blocks.
  virtual bool RequestRenewal(uint64_t generation) const = 0;
  // Read files and sources again (SIGHUP). Never blocks.
  virtual void Reload() const {}
  // {"source": ..., "access_key_id": MaskedKeyId, "expires": "ISO time", "renewals": N,
  //  "renewal_failures": N, "last_error": "..."}: never a secret.
  virtual std::string DescribeJson() const = 0;
};

// An access key id as logs and user.pcrfs.remote show it: its first and last four characters
// ("AKIA...MPLE"), enough to tell keys apart, not to hand one out. Short ids become "...".
std::string MaskedKeyId(const std::string& access_key_id);

// Fixed credentials (tests, and keys given once).
class StaticCredentialSource final : public AwsCredentialSource {
 public:
  StaticCredentialSource(Credentials credentials, std::string source)
      : snapshot_(std::make_shared<AwsCredentialsSnapshot>(
            AwsCredentialsSnapshot{std::move(credentials), std::nullopt, 1, std::move(source)})) {}
  std::shared_ptr<const AwsCredentialsSnapshot> Current() const override { return snapshot_; }
  bool RequestRenewal(uint64_t) const override { return false; }
  std::string DescribeJson() const override;

 private:
  std::shared_ptr<const AwsCredentialsSnapshot> snapshot_;
};

}  // namespace pcrfs
