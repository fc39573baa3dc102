// A main() for the fuzz targets without libFuzzer: replays files through
// LLVMFuzzerTestOneInput, so the regression inputs under tests/fuzz/regressions/ run in the
// normal (GCC) build as a ctest.
//
//   TARGET_replay PATH...   each PATH a file, or a folder whose regular files are all replayed
//
// A broken invariant aborts (FUZZ_CHECK), so the test fails on the first bad input. A folder
// that does not exist counts as empty (git keeps no empty folders). Exit codes: 0 every input
// replayed, 1 an input could not be read.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool Replay(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        if (!Replay(f)) return 1;
        ++replayed;
      }
    } else if (std::filesystem::exists(arg, ec)) {
      if (!Replay(arg)) return 1;
      ++replayed;
    }
  }
  std::printf("replay: %d inputs, no failure\n", replayed);
  return 0;
}
