// credential_process, run as botocore runs it: the command line split into words (Python's
// shlex.split), no shell, stdout the AWS JSON. Its own file because it is the one part of the
// credential chain (remote/aws_credentials.h) that starts processes.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pcrfs {

// What precedes a credential_process's stderr line in RunCredentialProcess's errors: the
// mounting user sees it at mount time; later (renewals) RenewingCredentials sends it to the log
// only, never to user.pcrfs.remote, which every user may read under allow_other.
inline constexpr std::string_view kCredentialProcessSaid = "; it said: ";

// The first line of text a server or a helper process said, printable (other bytes as '?') and
// at most `max` characters (then "..."): for error messages.
std::string OneLine(std::string_view s, size_t max = 200);

// A credential_process command line split into words as botocore splits it (Python's
// shlex.split: POSIX rules, no comments): blanks separate words; '...' keeps everything;
// "..." keeps everything but \" and \\; a backslash outside quotes keeps the next character.
// InvalidArgument for an open quote or a trailing backslash, or no word at all.
Result<std::vector<std::string>> SplitCommandLine(std::string_view command);

// The real credential_process runner, as botocore runs it: the words of SplitCommandLine,
// the first looked up in PATH, no shell; stdin /dev/null, stdout kept (at most 1 MiB),
// stderr's first line for errors. It runs in a process group of its own, killed whole when the
// helper exits (nothing it started outlives it) or at `timeout`; waiting for it is bounded by
// `timeout` too (a helper that closes its output and sleeps fails at the deadline).
Result<std::string> RunCredentialProcess(const std::string& command,
                                         std::chrono::milliseconds timeout);

}  // namespace pcrfs
