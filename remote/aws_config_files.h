// The AWS CLI's shared files (~/.aws/config, ~/.aws/credentials) as files: where home is and
// how their INI dialect reads. What they mean is for their two readers: the S3 settings
// (remote/s3_config.h: region, endpoint) and the credential chain (remote/aws_credentials.h),
// which both include this and not each other for it.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace pcrfs {

// Reads an environment variable; nullptr when unset. Tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;

// An AWS CLI INI file: section name -> key -> value.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
// Reads the INI dialect of the AWS CLI: [section], key = value, '#' and ';' comments. Nested
// values (indented lines under "s3 =") are read as keys of their own, which is harmless here.
// A file that does not exist is an empty IniFile with *exists false, not an error.
Result<IniFile> ReadIni(const std::string& path, bool* exists);

// The home folder for ~/.aws: $HOME, else the password database's home of the effective user
// (mount(8) starts helpers without HOME); "" when neither is known.
std::string HomeDirectory(const EnvLookup& env);

}  // namespace pcrfs
