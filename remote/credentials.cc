#include "remote/credentials.h"

namespace pcrfs {

std::string Credentials::ToString() const {
  if (empty()) return "(no credentials)";
  return access_key_id_ +
         (session_token_.empty() ? " (secret hidden)" : " (secret and session token hidden)");
}

}  // namespace pcrfs
