#include "mount-tools/cli.h"

#include <cstdio>
#include <iostream>

namespace pcrfs::tools {
namespace po = boost::program_options;

std::optional<int> ParseCommandLine(
    const char* command, const std::vector<std::string>& args,
    const po::options_description& visible,
    const std::vector<std::pair<const char*, std::string*>>& positionals, const char* exit_codes,
    po::variables_map* vm) {
  po::options_description hidden;
  po::positional_options_description pos;
  for (const auto& [name, target] : positionals) {
    hidden.add_options()(name, po::value<std::string>(target));
    pos.add(name, 1);
  }
  po::options_description all;
  all.add(visible).add(hidden);
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "pcr %s: %s\n", command, e.what());
    return 2;
  }
  if (vm->count("help")) {
    std::cout << visible << "\nexit codes: " << exit_codes << "\n";
    return 0;
  }
  return std::nullopt;
}

tl::expected<StoreFile, int> OpenStoreFile(const char* command, const std::string& store_dir,
                                           const std::string& path) {
  auto store = index::Store::Open(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr %s: %s\n", command, store.error().message().c_str());
    return tl::unexpected(2);
  }
  auto entry = (*store)->index().LookupPath(path);
  if (!entry) {
    const bool missing = entry.error().IsNotFound();
    std::fprintf(stderr, "pcr %s: %s: %s\n", command, path.c_str(),
                 missing ? "no such file in the store" : entry.error().message().c_str());
    return tl::unexpected(missing ? 2 : 1);
  }
  if (entry->is_dir()) {
    std::fprintf(stderr, "pcr %s: %s: is a directory\n", command, path.c_str());
    return tl::unexpected(2);
  }
  return StoreFile{std::move(*store), std::move(*entry)};
}

}  // namespace pcrfs::tools
