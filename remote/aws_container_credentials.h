// The credential chain's container source (step 5 of remote/aws_credentials.h, and
// credential_source EcsContainer): the ECS task endpoint or the EKS Pod Identity agent, as
// botocore reaches them.
#pragma once

#include "common/status.h"
#include "remote/aws_chain.h"

namespace pcrfs::aws_chain {

// Container credentials: NotFound when neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor
// _FULL_URI is set; InvalidArgument for a FULL_URI over plain http to a host that is not a
// loopback address or the ECS / EKS agents'.
Result<FetchedCredentials> Container(const ChainInputs& in);

}  // namespace pcrfs::aws_chain
