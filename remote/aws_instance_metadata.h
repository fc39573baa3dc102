// The credential chain's EC2 instance metadata source (step 6 of remote/aws_credentials.h, and
// credential_source Ec2InstanceMetadata): IMDSv2, IMDSv1 where allowed, as botocore reaches it.
#pragma once

#include "common/status.h"
#include "remote/aws_chain.h"

namespace pcrfs::aws_chain {

// EC2 instance metadata: NotFound (the chain's "nothing here") when AWS_EC2_METADATA_DISABLED
// is true, there is no metadata service or no role, or IMDSv1 would be needed and
// AWS_EC2_METADATA_V1_DISABLED refuses it.
Result<FetchedCredentials> InstanceMetadata(const ChainInputs& in);

}  // namespace pcrfs::aws_chain
