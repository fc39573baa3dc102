// AWS STS as the credential chain calls it: AssumeRole (a profile's role_arn, signed with the
// source profile's credentials) and AssumeRoleWithWebIdentity (unsigned, with a token file
// that is read again at every renewal: EKS rotates it). The endpoint: AWS_ENDPOINT_URL_STS,
// else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com with
// AWS_STS_REGIONAL_ENDPOINTS=regional, else https://sts.amazonaws.com. Errors name the role,
// never a token or a key.
#pragma once

#include <string>

#include "common/status.h"
#include "remote/aws_chain.h"
#include "remote/credentials.h"
#include "remote/sigv4.h"

namespace pcrfs::aws_chain {

// One STS call with `params` (form-encoded), signed for `region` with `signer`, or unsigned
// when `signer` is null. The credentials it returns have `source` as their source.
Result<FetchedCredentials> CallSts(const ChainInputs& in, const std::string& region,
                                   const HeaderList& params, const Credentials* signer,
                                   const std::string& role_arn, std::string source);

// AssumeRoleWithWebIdentity with the token in `token_file`, as `session_name` (empty:
// SessionName's default).
Result<FetchedCredentials> WebIdentity(const ChainInputs& in, const std::string& region,
                                       const std::string& token_file, const std::string& role_arn,
                                       const std::string& session_name, std::string source);

// The RoleSessionName: `configured`, else "pcrfs-<unix time>".
std::string SessionName(const ChainInputs& in, const std::string& configured);

}  // namespace pcrfs::aws_chain
