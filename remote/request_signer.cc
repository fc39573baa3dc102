#include "remote/request_signer.h"

#include <nlohmann/json.hpp>

#include "remote/aws_credential_source.h"

namespace pcrfs {

bool RefusalIsAuth(long status, std::string_view code) {
  if (status == 401) return true;
  if (status != 400 && status != 403) return false;
  for (std::string_view c :
       {"ExpiredToken", "ExpiredTokenException", "InvalidToken", "TokenRefreshRequired",
        "InvalidAccessKeyId", "SignatureDoesNotMatch", "RequestExpired", "AuthenticationFailed",
        "AuthorizationFailure", "InvalidAuthenticationInfo"}) {
    if (code == c) return true;
  }
  return false;
}

std::string MaskedKeyId(const std::string& id) {
  if (id.size() < 12) return "...";
  return id.substr(0, 4) + "..." + id.substr(id.size() - 4);
}

std::string StaticCredentialSource::DescribeJson() const {
  nlohmann::json j;
  j["source"] = snapshot_->source;
  j["access_key_id"] = MaskedKeyId(snapshot_->credentials.access_key_id());
  return j.dump();
}

}  // namespace pcrfs
