#include "remote/aws_credential_source.h"

#include <nlohmann/json.hpp>

namespace pcrfs {

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
