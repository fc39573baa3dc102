// The credential chain's shared parts, for its own files only (remote/aws_credentials.cc, the
// chain and its renewal; remote/aws_metadata_credentials.cc, the container and instance metadata
// sources). Not an interface for anyone else: remote/aws_credentials.h is.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "remote/aws_credentials.h"

namespace pcrfs::aws_chain {

// What every fetch of one resolution shares: the options and the dependencies, filled in.
struct ChainInputs {
  AwsCredentialOptions options;
  AwsCredentialDeps deps;
  std::string profile;  // the profile's name
  bool profile_named = false;
  std::string credentials_path, config_path;

  std::string Env(const char* name) const {
    const char* v = deps.env(name);
    return v == nullptr ? "" : std::string(v);
  }
};

// A key, secret or token that will go into an HTTP header: printable ASCII without spaces (a
// hostile answer must not smuggle CR LF into a request), at most 8 KiB.
bool ValidCredentialField(std::string_view s);

// A small file holding a token (web identity, container authorization): read whole (at most
// 64 KiB), trimmed; `what` names it in errors; a warning when others may read it.
Result<std::string> ReadTokenFile(const std::string& path, const char* what);

// Container credentials (step 5 of the chain, and credential_source EcsContainer): NotFound when
// neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor _FULL_URI is set.
Result<FetchedCredentials> Container(const ChainInputs& in);

// EC2 instance metadata (step 6, and credential_source Ec2InstanceMetadata): NotFound when there
// is no metadata service, no role, or IMDSv1 would be needed and AWS_EC2_METADATA_V1_DISABLED
// refuses it.
Result<FetchedCredentials> InstanceMetadata(const ChainInputs& in);

}  // namespace pcrfs::aws_chain
