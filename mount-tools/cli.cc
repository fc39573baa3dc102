#include "mount-tools/cli.h"

#include <cstdio>
#include <iostream>
#include <string_view>

#include "location/store_location.h"
#include "remote/url.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

std::optional<int> ParseCommandLine(
    const char* command, const std::vector<std::string>& args,
    const po::options_description& visible,
    const std::vector<std::pair<const char*, std::string*>>& positionals, const char* exit_codes,
    po::variables_map* vm, std::vector<std::string>* rest) {
  po::options_description hidden;
  po::positional_options_description pos;
  for (const auto& [name, target] : positionals) {
    hidden.add_options()(name, po::value<std::string>(target));
    pos.add(name, 1);
  }
  if (rest != nullptr) {
    hidden.add_options()("rest", po::value<std::vector<std::string>>(rest));
    pos.add("rest", -1);
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

Result<index::Entry> ResolveStorePath(const index::IndexReader& index, const std::string& path) {
  std::vector<std::string_view> parts;  // the folders walked down so far, and the last name
  auto joined = [&] {
    std::string p;
    for (std::string_view part : parts) (p += part) += '/';
    return p;
  };
  bool want_dir = false;  // "a/", "a/." and "a/.." name a folder, as for the kernel
  for (size_t pos = 0; pos <= path.size();) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    const std::string_view name = std::string_view(path).substr(pos, slash - pos);
    pos = slash + 1;
    want_dir = name.empty() || name == "." || name == "..";
    if (name.empty() || name == ".") continue;
    if (name != "..") {
      parts.push_back(name);
      continue;
    }
    if (parts.empty()) {
      return Err(Status::InvalidArgument("\"..\" leads out of the dataset's root"));
    }
    // The folder ".." leaves must exist and be a folder, as the kernel resolves it.
    auto dir = index.LookupPath(joined());
    if (!dir) return Err(dir.error());
    if (!dir->is_dir()) return Err(Status::InvalidArgument("a component is not a directory"));
    parts.pop_back();
  }
  auto entry = index.LookupPath(joined());
  if (!entry) return entry;
  if (want_dir && !entry->is_dir()) return Err(Status::InvalidArgument("not a directory"));
  return entry;
}

Result<std::unique_ptr<index::Store>> OpenStore(const std::string& store) {
  if (!IsRemoteUrl(store)) return index::Store::Open(store);
  auto options = RemoteOptionsFromEnv();
  if (!options) return Err(options.error());
  return OpenStoreLocation(store, *options);
}

std::string ShownStore(const std::string& store) {
  return IsRemoteUrl(store) ? RedactUrl(store) : store;
}

tl::expected<StoreFile, int> OpenStoreFile(const char* command, const std::string& store_dir,
                                           const std::string& path) {
  auto store = OpenStore(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr %s: %s\n", command, store.error().message().c_str());
    return tl::unexpected(2);
  }
  auto entry = ResolveStorePath((*store)->index(), path);
  if (!entry) {
    const Status& e = entry.error();
    const bool usage = e.IsNotFound() || e.code() == Status::Code::kInvalidArgument;
    std::fprintf(stderr, "pcr %s: %s: %s\n", command, path.c_str(),
                 e.IsNotFound() ? "no such file in the store" : e.message().c_str());
    return tl::unexpected(usage ? 2 : 1);
  }
  if (entry->is_dir()) {
    std::fprintf(stderr, "pcr %s: %s: is a directory\n", command, path.c_str());
    return tl::unexpected(2);
  }
  return StoreFile{std::move(*store), std::move(*entry)};
}

}  // namespace pcrfs::tools
