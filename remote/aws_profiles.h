// The credential chain's profile steps (2 to 4 of remote/aws_credentials.h): the AWS CLI's
// files as profiles (the config file's section overridden by the credentials file's, as
// botocore merges them), a profile's role (STS AssumeRole from a source_profile or a
// credential_source), web identity (the environment's, else the profile's), static keys and
// credential_process.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "remote/aws_chain.h"

namespace pcrfs::aws_chain {

using Section = std::map<std::string, std::string>;

// The profiles as the files say now (read again at each fetch).
struct Profiles {
  bool credentials_exists = false, config_exists = false;
  IniFile credentials, config;

  const Section* InCredentials(const std::string& name) const {
    auto it = credentials.find(name);
    return it == credentials.end() ? nullptr : &it->second;
  }
  const Section* InConfig(const std::string& name) const {
    auto it = config.find(name == "default" ? "default" : "profile " + name);
    if (it == config.end() && name == "default") it = config.find("profile default");
    return it == config.end() ? nullptr : &it->second;
  }
  bool Exists(const std::string& name) const {
    return InCredentials(name) != nullptr || InConfig(name) != nullptr;
  }
  // botocore's view: the config file's section, overridden by the credentials file's.
  Section Merged(const std::string& name) const {
    Section s;
    if (const Section* c = InConfig(name)) s = *c;
    if (const Section* c = InCredentials(name)) {
      for (const auto& [k, v] : *c) s[k] = v;
    }
    return s;
  }
};

// Reads both files (a file that does not exist has no profiles); warns when others may read
// one.
Result<Profiles> LoadProfiles(const ChainInputs& in);

// "CREDENTIALS_FILE or CONFIG_FILE", for messages.
std::string FilesNamed(const ChainInputs& in);

// Steps 2 to 4 (what depends on the profile, with the environment's web identity between
// them, as botocore orders them). nullopt with the reasons when none of them has credentials.
// `files_only` (a renewal of keys from the files): reading the files only; a profile that now
// needs STS or a process fails with NotSupported. *is_static: the result is static keys from a
// file.
Result<std::optional<FetchedCredentials>> FromProfile(const ChainInputs& in, bool files_only,
                                                      bool* is_static, std::string* why_profile,
                                                      std::string* why_web_identity);

}  // namespace pcrfs::aws_chain
