// pcr cat STORE PATH [--scans K]
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "common/file_util.h"
#include "index/store.h"
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
  po::options_description hidden;
  std::string store_dir, path;
  hidden.add_options()("store", po::value<std::string>(&store_dir))("path",
                                                                    po::value<std::string>(&path));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("store", 1).add("path", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "pcr cat: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\nexit codes: 0 done, 1 read failed (damaged store), 2 bad arguments\n";
    return 0;
  }
  if (store_dir.empty() || !vm.count("path")) {
    std::fprintf(stderr, "pcr cat: STORE and PATH are required (see pcr cat --help)\n");
    return 2;
  }
  if (scans < 1 || scans > 10) {
    std::fprintf(stderr, "pcr cat: --scans must be between 1 and 10\n");
    return 2;
  }
  auto store = index::Store::Open(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr cat: %s\n", store.error().message().c_str());
    return 2;
  }
  auto entry = (*store)->index().LookupPath(path);
  if (!entry) {
    std::fprintf(
        stderr, "pcr cat: %s: %s\n", path.c_str(),
        entry.error().IsNotFound() ? "no such file in the store" : entry.error().message().c_str());
    return entry.error().IsNotFound() ? 2 : 1;
  }
  if (entry->is_dir()) {
    std::fprintf(stderr, "pcr cat: %s: is a directory\n", path.c_str());
    return 2;
  }
  std::vector<uint8_t> bytes;
  if (Status s = (*store)->ReadFile(*entry, scans, &bytes); !s.ok()) {
    std::fprintf(stderr, "pcr cat: %s: %s\n", path.c_str(), s.message().c_str());
    return 1;
  }
  if (Status s = WriteFull(STDOUT_FILENO, bytes.data(), bytes.size(), "stdout"); !s.ok()) {
    std::fprintf(stderr, "pcr cat: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace pcrfs::tools
