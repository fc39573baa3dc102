#include "remote/request_signer.h"

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

}  // namespace pcrfs
