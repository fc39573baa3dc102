#include "remote/aws_config_files.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace pcrfs {
namespace {

std::string Trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

Result<IniFile> ReadIni(const std::string& path, bool* exists) {
  IniFile ini;
  std::ifstream in(path);
  *exists = false;
  if (!in) {
    if (errno == ENOENT || errno == ENOTDIR) return ini;
    return Err(Status::FromErrno(path, errno));
  }
  *exists = true;
  std::string line, section;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = Trim(line.substr(1, line.size() - 2));
      ini[section];
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    ini[section][Trim(line.substr(0, eq))] = Trim(line.substr(eq + 1));
  }
  if (in.bad()) return Err(Status::IOError(path + ": read error"));
  return ini;
}

std::string HomeDirectory(const EnvLookup& env) {
  const char* home = env ? env("HOME") : std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return home;
  std::vector<char> buf(16384);
  struct passwd pw;
  struct passwd* result = nullptr;
  if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &result) == 0 && result != nullptr &&
      result->pw_dir != nullptr) {
    return result->pw_dir;
  }
  return "";
}

}  // namespace pcrfs
