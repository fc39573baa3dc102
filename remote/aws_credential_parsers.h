// The parsers of what the AWS credential sources answer (an STS XML answer, credential_process's
// JSON, the container's and instance metadata's JSON, an ISO 8601 expiration), and the check
// every fetched key passes before it goes into an HTTP header. Public for tests and the fuzz
// target (tests/fuzz/aws_credentials_fuzzer.cc). Each parser takes hostile text and fails with
// Corruption in one line that never quotes the text.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "remote/credentials.h"

namespace pcrfs {

using Clock = std::chrono::system_clock;

// Credentials as one provider returns them.
struct FetchedCredentials {
  Credentials credentials;
  std::optional<Clock::time_point> expiration;  // nullopt: long-term
  std::string source;                           // AwsCredentialsSnapshot::source
};

// "2026-11-27T12:00:00Z", with fractional seconds, "+00:00" or "-05:30" offsets.
Result<Clock::time_point> ParseIso8601(std::string_view text);
// "2026-11-27T12:00:00Z".
std::string FormatIso8601(Clock::time_point t);
// An STS answer: <...Result><Credentials><AccessKeyId>..</AccessKeyId><SecretAccessKey>..
// <SessionToken>..<Expiration>..</Credentials>. An <Error><Code>C</Code><Message>M</Message>
// answer is InvalidArgument "C: M" (printable, capped at 200 characters).
Result<FetchedCredentials> ParseStsCredentials(std::string_view xml);
// credential_process's stdout: {"Version": 1, "AccessKeyId", "SecretAccessKey",
// "SessionToken"?, "Expiration"?}.
Result<FetchedCredentials> ParseProcessCredentials(std::string_view json);
// The container endpoint's and IMDS's JSON: "AccessKeyId", "SecretAccessKey", "Token",
// "Expiration" (IMDS adds "Code": "Success"; another Code is an error).
Result<FetchedCredentials> ParseMetadataCredentials(std::string_view json);

namespace aws_chain {

// A key, secret or token that will go into an HTTP header: printable ASCII without spaces (a
// hostile answer must not smuggle CR LF into a request), at most 8 KiB.
bool ValidCredentialField(std::string_view s);

// Corruption naming `what` unless the key id, the secret and a session token (if any) are each
// ValidCredentialField.
Status CheckCredentials(const FetchedCredentials& f, std::string_view what);

// The STS <Error> of an answer that is not a success: "Code: Message" (one line each), or "" if
// there is none.
std::string StsError(std::string_view xml);

}  // namespace aws_chain
}  // namespace pcrfs
