// Files: aws_credentials.cc (the resolution), aws_chain.h (the options, the dependencies and
// what the sources share; step 1), aws_profiles.h (steps 2 to 4), aws_sts.h (STS),
// credential_process.h (the helper runner), aws_container_credentials.h (step 5),
// aws_instance_metadata.h (step 6), aws_credential_parsers.h (what the sources answer, parsed),
// renewing_credentials.h (RenewingCredentials and its schedule).
//
// The AWS credential chain, resolved the way botocore resolves it (botocore is the judge:
// docs in /work/shared/DESIGN.md section 8), and RenewingCredentials, which keeps temporary
// credentials fresh in the background.
//
// The chain, first hit wins (botocore's provider order):
//  1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN). Long-term.
//     Skipped when options.profile names a profile (-o profile), as botocore skips it for
//     Session(profile=...) and the CLI's --profile; not for AWS_PROFILE.
//  2. assume role from the profile: `role_arn` with `source_profile` (resolved recursively;
//     a profile may name itself as source when it holds static keys) or `credential_source`
//     (Environment, Ec2InstanceMetadata, EcsContainer); STS AssumeRole signed with SigV4 by
//     the source's credentials. `role_session_name`, `external_id`, `duration_seconds` are
//     honoured. A profile with `web_identity_token_file` is left to step 3.
//  3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE (else the profile's web_identity_token_file),
//     AWS_ROLE_ARN (else role_arn), AWS_ROLE_SESSION_NAME (else role_session_name, else
//     "pcrfs-<unix time>"): STS AssumeRoleWithWebIdentity, unsigned. The token file is read
//     again at every renewal (EKS rotates it).
//  4. the profile's static keys in the credentials file, then `credential_process`, then static
//     keys in the config file.
//  5. container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (at http://169.254.170.2) or
//     AWS_CONTAINER_CREDENTIALS_FULL_URI (http only to a loopback address or the ECS/EKS link
//     local ones; https anywhere), with `Authorization` from the file
//     AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every renewal) or
//     AWS_CONTAINER_AUTHORIZATION_TOKEN.
//  6. EC2 instance metadata, IMDSv2 (IMDSv1 when the token PUT answers 403/404/405, as
//     botocore); skipped with AWS_EC2_METADATA_DISABLED=true; endpoint
//     AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254. A 1 s connect timeout: a
//     machine without IMDS gets its answer within about 2 s.
//
// The profile: options.profile, else AWS_PROFILE, else "default". Files: options, else
// AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE, else HOME/.aws/credentials and HOME/.aws/config
// (HOME: the variable, else the password database's home of the effective user: mount(8) runs
// helpers without HOME). Sections: "[NAME]" in the credentials file, "[profile NAME]" (or
// "[default]") in the config file; the credentials file's values win, as botocore merges them.
// STS: AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com with
// AWS_STS_REGIONAL_ENDPOINTS=regional, else https://sts.amazonaws.com (botocore 1.29's default);
// it signs for options.region, else AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
// us-east-1.
//
// Errors are one line and never hold a secret, a session token, a web identity token or a
// credential_process's stdout. Its stderr's first line (that is where it explains) is shown
// when the mount fails; a failed renewal's goes to the log only, not to DescribeJson.
#pragma once

#include <memory>

#include "common/status.h"
#include "remote/aws_chain.h"
#include "remote/aws_credential_parsers.h"
#include "remote/credential_process.h"
#include "remote/renewing_credentials.h"

namespace pcrfs {

// Resolves the chain once (blocking) and returns its credentials, ready to renew (no thread
// yet: see StartRenewal). options.no_sign: nullptr (anonymous), nothing resolved.
// Errors, one line:
//  - NotFound when no source has credentials, naming each source and why it had none:
//    "no AWS credentials: environment (AWS_ACCESS_KEY_ID unset), profile 'default' (not in
//    /root/.aws/credentials or /root/.aws/config), web identity (AWS_WEB_IDENTITY_TOKEN_FILE
//    unset), container (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset), instance
//    metadata (http://169.254.169.254: Connection refused)". Callers put the store's URL first.
//  - InvalidArgument for a configuration botocore refuses too: a key id without a secret, a
//    profile named explicitly (option or AWS_PROFILE) that exists in neither file (both named),
//    a source_profile loop or absent source profile, role_arn without source_profile or
//    credential_source (or with both), an unknown credential_source, a FULL_URI to a host that
//    is not allowed.
//  - the failing source's error when a source that is configured fails: STS's answer ("role
//    ARN: AccessDenied: ..."), a credential_process exit status, a container endpoint's status,
//    an unreadable token file.
Result<std::shared_ptr<RenewingCredentials>> ResolveAwsCredentials(
    const AwsCredentialOptions& options, AwsCredentialDeps deps = {});

}  // namespace pcrfs
