// AWS credentials as a value that never prints its secret: what the credential chain
// (remote/aws_credential_source.h) hands out and the SigV4 signer (remote/sigv4.h) signs with.
// Its own unit, so that neither of those two includes the other for it.
#pragma once

#include <string>
#include <utility>

#include "common/secret.h"

namespace pcrfs {

// AWS credentials. Every printable form (ToString, operator<<) shows the access key id only:
// the secret and the session token never reach a log or a message. Copyable value.
class Credentials {
 public:
  Credentials() = default;
  Credentials(std::string access_key_id, std::string secret_access_key,
              std::string session_token = "")
      : access_key_id_(std::move(access_key_id)),
        secret_access_key_(std::move(secret_access_key)),
        session_token_(std::move(session_token)) {}
  // The secret and the token are wiped when freed (WipeString), a moved-from copy's too (a
  // short string's bytes stay in its inline buffer when moved).
  ~Credentials() { Wipe(); }
  Credentials(const Credentials&) = default;
  Credentials& operator=(const Credentials&) = default;
  Credentials(Credentials&& o) noexcept
      : access_key_id_(std::move(o.access_key_id_)),
        secret_access_key_(std::move(o.secret_access_key_)),
        session_token_(std::move(o.session_token_)) {
    o.Wipe();
  }
  Credentials& operator=(Credentials&& o) noexcept {
    if (this != &o) {
      Wipe();
      access_key_id_ = std::move(o.access_key_id_);
      secret_access_key_ = std::move(o.secret_access_key_);
      session_token_ = std::move(o.session_token_);
      o.Wipe();
    }
    return *this;
  }

  const std::string& access_key_id() const { return access_key_id_; }
  // For the signer only.
  const std::string& secret_access_key() const { return secret_access_key_; }
  const std::string& session_token() const { return session_token_; }
  bool empty() const { return access_key_id_.empty(); }
  // "AKIAIOSFODNN7EXAMPLE (secret hidden)" or "... (secret and session token hidden)".
  std::string ToString() const;

 private:
  void Wipe() {
    WipeString(secret_access_key_);
    WipeString(session_token_);
  }

  std::string access_key_id_;
  std::string secret_access_key_;
  std::string session_token_;
};

template <typename Stream>
Stream& operator<<(Stream& os, const Credentials& c) {
  os << c.ToString();
  return os;
}

}  // namespace pcrfs
