// The `pcr` subcommands. Each takes the arguments after the subcommand name and returns the
// process exit code (documented in the README).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pcrfs::tools {

int RunBuild(const std::vector<std::string>& args);
int RunCat(const std::vector<std::string>& args);
int RunLadder(const std::vector<std::string>& args);
// Internal, for the tests (docs/quality.md): not in the usage text.
int RunQualityPair(const std::vector<std::string>& args);
int RunQualitySample(const std::vector<std::string>& args);
int RunInspect(const std::vector<std::string>& args);
int RunVerify(const std::vector<std::string>& args);

// "1.5 MiB", "730 B"
std::string HumanBytes(uint64_t bytes);

}  // namespace pcrfs::tools
