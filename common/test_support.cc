#include "common/test_support.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace pcrfs::test {

TempDir::TempDir() {
  std::string tmpl = "/tmp/pcrfs-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> FilesWithExtension(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ext) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("write failed: " + path);
}

Status MemoryFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  if (offset > data_.size() || n > data_.size() - offset) {
    return Status::Corruption(name_ + ": read past the end");
  }
  if (n > 0) std::memcpy(dst, data_.data() + offset, n);
  return Status::OK();
}

Status FaultInjectingFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  if (n > 0 && offset < bad_end_ && offset + n > bad_begin_) {
    return Status::FromErrno(name() + ": injected fault", EIO);
  }
  return base_->Read(offset, n, dst);
}

}  // namespace pcrfs::test
