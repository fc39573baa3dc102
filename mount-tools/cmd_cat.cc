// pcr cat STORE PATH [--scans K]
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>

#include "common/file_util.h"
#include "index/store.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

int RunCat(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr cat STORE PATH [--scans K]\n\n"
      "Writes the file PATH (relative to the dataset root) to stdout at level K.\n\noptions");
  int scans = 10;
  opts.add_options()("help,h", "show this help")(
      "scans,k", po::value<int>(&scans)->default_value(10), "level: scan groups 1..10");
  std::string store_dir, path;
  po::variables_map vm;
  if (auto exit = ParseCommandLine("cat", args, opts, {{"store", &store_dir}, {"path", &path}},
                                   "0 done, 1 read failed (damaged store), 2 bad arguments", &vm)) {
    return *exit;
  }
  if (store_dir.empty() || path.empty()) {
    std::fprintf(stderr, "pcr cat: STORE and PATH are required (see pcr cat --help)\n");
    return 2;
  }
  if (scans < 1 || scans > 10) {
    std::fprintf(stderr, "pcr cat: --scans must be between 1 and 10\n");
    return 2;
  }
  auto file = OpenStoreFile("cat", store_dir, path);
  if (!file) return file.error();
  // Block by block, each checked before it is written: constant memory for any file size. A
  // damaged block stops the output there (exit 1), never passes through.
  Status write_status;
  Status s = file->store->ReadFileTo(file->entry, scans, [&](std::span<const uint8_t> bytes) {
    write_status = WriteFull(STDOUT_FILENO, bytes.data(), bytes.size(), "stdout");
    return write_status;
  });
  if (!write_status.ok()) {
    std::fprintf(stderr, "pcr cat: %s\n", write_status.message().c_str());
    return 1;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "pcr cat: %s: %s\n", path.c_str(), s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace pcrfs::tools
