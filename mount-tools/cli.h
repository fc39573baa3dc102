// What every `pcr` subcommand does the same way: parse its arguments, open a store and find
// a file in it, with one-line errors and the documented exit codes.
#pragma once

#include <boost/program_options.hpp>
#include <memory>
#include <optional>
#include <string>
#include <tl/expected.hpp>
#include <utility>
#include <vector>

#include "fs/mount_options.h"
#include "index/entry.h"
#include "index/store.h"
#include "location/store_location.h"

namespace pcrfs::tools {

// Parses `pcr <command>` arguments: the options in `visible`, then the positional arguments
// in order into *positionals[i].second, and with `rest` the ones after those into *rest (else
// they are a usage error). Returns an exit code to return at once (0 after --help, which
// prints `visible` and `exit_codes`; 2 after a usage error, one line on stderr), or nullopt to
// go on.
std::optional<int> ParseCommandLine(
    const char* command, const std::vector<std::string>& args,
    const boost::program_options::options_description& visible,
    const std::vector<std::pair<const char*, std::string*>>& positionals, const char* exit_codes,
    boost::program_options::variables_map* vm, std::vector<std::string>* rest = nullptr);

// Finds PATH in the store as the mount resolves it below its root: empty and "." components
// are skipped ("./a//b.jpg" is "a/b.jpg"), ".." goes up from a folder that must exist, and a
// path that ends in "/", "." or ".." must name a folder. NotFound for a missing entry,
// InvalidArgument for ".." above the root or a file used as a folder.
Result<index::Entry> ResolveStorePath(const index::IndexReader& index, const std::string& path);

struct StoreFile {
  std::unique_ptr<index::Store> store;
  index::Entry entry;
};

// Opens STORE and finds the file PATH in it. On failure prints "pcr <command>: ..." and returns
// the exit code: 2 for a bad store, no such file or a folder, 1 for a damaged index.
// Opens STORE, a folder or a URL (s3://, http(s)://: its metadata cached as pcrfs does). A
// remote store's options come from the environment: AWS_* for S3 (as the AWS CLI reads them),
// PCRFS_CACHE_DIR, PCRFS_HEADER_FILE, PCRFS_CA_FILE, PCRFS_REMOTE_TIMEOUT (seconds).
Result<std::unique_ptr<index::Store>> OpenStore(const std::string& store);

// STORE or SRC as pcr may print it: a URL without its query (a signed URL's token, a SAS),
// fragment and user info (remote/url.h RedactUrl); a local path as given.
std::string ShownStore(const std::string& store);

// The options of a remote store or source from the environment, as OpenStore reads them: the
// daemon's option table names a PCRFS_* variable for some options (PCRFS_CACHE_DIR,
// PCRFS_HEADER_FILE, PCRFS_CA_FILE, PCRFS_REMOTE_TIMEOUT), checked as -o checks them. The -o
// credentials_file, config_file, profile and account have none: the resolvers read
// AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, AWS_PROFILE and AZURE_STORAGE_ACCOUNT
// themselves, as the AWS and Azure CLIs do.
using fs::RemoteOptionsFromEnv;

tl::expected<StoreFile, int> OpenStoreFile(const char* command, const std::string& store_dir,
                                           const std::string& path);

}  // namespace pcrfs::tools
