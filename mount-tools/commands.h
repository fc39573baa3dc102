// The `pcr` subcommands. Each takes the arguments after the subcommand name and returns the
// process exit code (documented in the README).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/human_bytes.h"  // HumanBytes, for the reports

namespace pcrfs::tools {

int RunBuild(const std::vector<std::string>& args);
int RunMerge(const std::vector<std::string>& args);
int RunCat(const std::vector<std::string>& args);
int RunExtract(const std::vector<std::string>& args);
int RunLadder(const std::vector<std::string>& args);
// Internal, for the tests (docs/quality.md): not in the usage text.
int RunQualityPair(const std::vector<std::string>& args);
int RunQualitySample(const std::vector<std::string>& args);
int RunInspect(const std::vector<std::string>& args);
int RunVerify(const std::vector<std::string>& args);
int RunTop(const std::vector<std::string>& args);
int RunUpgrade(const std::vector<std::string>& args);
// Internal, for the tests of older stores: not in the usage text.
int RunLmdbIndexForTests(const std::vector<std::string>& args);

// The report of `pcr build` and `pcr merge` (cmd_build.cc).
struct BuildReport;
void PrintReport(const BuildReport& r, const std::string& store, const char* command);

}  // namespace pcrfs::tools
