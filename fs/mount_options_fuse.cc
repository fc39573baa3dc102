// ParseMountOptions: fuse_opt over the option table (mount_options.cc).
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse3/fuse_opt.h>

#include "fs/mount_options.h"

namespace pcrfs::fs {
namespace {

// fuse_opt's keys: the table's option i is kFirstOption + i. Each is taken as text and checked
// after parsing, because fuse_opt's own "%u" accepts "3x" and wraps "-5".
enum Key : int { kReadWrite = 1, kHelp, kVersion, kFirstOption = 100 };

struct ParseState {
  MountConfig* config;
  std::map<size_t, std::string> given;  // by option; repeated: see MountOptionRepeats
  std::string error;                    // the first problem found while parsing
  int nonopt_seen = 0;
};

// fuse_opt's callback: 0 consumes the argument, 1 keeps it for libfuse, -1 stops.
int OptProc(void* data, const char* arg, int key, fuse_args*) {
  auto* st = static_cast<ParseState*>(data);
  const std::string_view a(arg);
  switch (key) {
    case FUSE_OPT_KEY_NONOPT:
      if (st->nonopt_seen++ == 0) {
        st->config->store = a;
        return 0;
      }
      if (st->nonopt_seen == 2) st->config->mountpoint = a;
      return 1;
    case FUSE_OPT_KEY_OPT:
      if (a == "allow_other") st->config->allow_other = true;
      return 1;
    case kReadWrite:
      st->error = "-o rw: the store is read-only (pcrfs always mounts ro)";
      return -1;
    case kHelp:
      st->config->show_help = true;
      return 1;
    case kVersion:
      st->config->show_version = true;
      return 1;
    default: {
      const size_t eq = a.find('=');
      const size_t i = static_cast<size_t>(key - kFirstOption);
      std::string value = eq == a.npos ? "" : std::string(a.substr(eq + 1));
      auto [it, first] = st->given.try_emplace(i, value);
      if (!first) it->second = MountOptionRepeats(i) ? it->second + '\0' + value : value;
      return 0;
    }
  }
}

}  // namespace

Result<MountConfig> ParseMountOptions(int argc, const char* const argv[]) {
  static const std::vector<std::string> templates = MountOptionTemplates();
  std::vector<fuse_opt> specs = {FUSE_OPT_KEY("rw", kReadWrite), FUSE_OPT_KEY("-h", kHelp),
                                 FUSE_OPT_KEY("--help", kHelp), FUSE_OPT_KEY("-V", kVersion),
                                 FUSE_OPT_KEY("--version", kVersion)};
  for (size_t i = 0; i < templates.size(); ++i) {
    if (!templates[i].empty()) {
      specs.push_back(FUSE_OPT_KEY(templates[i].c_str(), kFirstOption + static_cast<int>(i)));
    }
  }
  specs.push_back(FUSE_OPT_END);

  MountConfig config;
  ParseState st{&config, {}, {}, 0};
  fuse_args args = FUSE_ARGS_INIT(argc, const_cast<char**>(argv));
  if (fuse_opt_parse(&args, &st, specs.data(), OptProc) != 0) {
    fuse_opt_free_args(&args);
    // fuse_opt has printed its own reason (e.g. "-o" without a value) unless we have one.
    return Err(Status::InvalidArgument(st.error.empty() ? "invalid arguments" : st.error));
  }
  for (int i = 0; i < args.argc; ++i) config.fuse_args.emplace_back(args.argv[i]);
  fuse_opt_free_args(&args);

  if (config.show_help || config.show_version) return config;
  if (config.store.empty() || config.mountpoint.empty()) {
    return Err(Status::InvalidArgument("STORE and MOUNTPOINT are required (see pcrfs --help)"));
  }
  PCRFS_RETURN_ERR_IF_ERROR(ApplyMountOptions(st.given, &config));
  return config;
}

}  // namespace pcrfs::fs
