// make_test_jpegs OUTDIR [--hostile]
//
// Writes every variety of tests/testdata/jpeg_factory.h into OUTDIR as named .jpg files. With
// --hostile it also writes OUTDIR/hostile/: files the transcoder must store as passthrough
// (empty, not a JPEG, truncated, trailing data after EOI, corrupt entropy data).
//
// Exit codes: 0 done, 1 a file could not be generated or written, 2 usage.

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/testdata/jpeg_factory.h"

namespace {

bool Write(const std::string& path, const std::vector<uint8_t>& data) {
  pcrfs::Status s = pcrfs::WriteFileAtomic(path, data.data(), data.size());
  if (!s.ok()) {
    std::fprintf(stderr, "make_test_jpegs: %s\n", s.ToString().c_str());
    return false;
  }
  return true;
}

bool MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "make_test_jpegs: mkdir %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

bool WriteHostile(const std::string& dir) {
  if (!MakeDir(dir)) return false;
  pcrfs::testdata::JpegSpec spec;
  spec.width = 200;
  spec.height = 150;
  auto jpeg = pcrfs::testdata::MakeTestJpeg(spec);
  if (!jpeg) return false;
  std::vector<uint8_t> truncated(jpeg->begin(), jpeg->begin() + jpeg->size() / 2);
  std::vector<uint8_t> trailing = *jpeg;
  for (char c : std::string("trailing garbage")) trailing.push_back(static_cast<uint8_t>(c));
  std::vector<uint8_t> corrupt = *jpeg;
  // Overwrite entropy data in the middle with a bogus marker.
  corrupt[corrupt.size() / 2] = 0xFF;
  corrupt[corrupt.size() / 2 + 1] = 0xC8;
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13};
  return Write(dir + "/empty.jpg", {}) && Write(dir + "/not_jpeg.jpg", png) &&
         Write(dir + "/truncated.jpg", truncated) && Write(dir + "/trailing.jpg", trailing) &&
         Write(dir + "/corrupt.jpg", corrupt);
}

}  // namespace

int main(int argc, char** argv) {
  bool hostile = argc == 3 && std::strcmp(argv[2], "--hostile") == 0;
  if (argc >= 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::printf("usage: make_test_jpegs OUTDIR [--hostile]\n");
    return 0;
  }
  // An OUTDIR that looks like an option is a mistake (`--help` once made a folder of that name).
  if (argc < 2 || argv[1][0] == '-' || (argc == 3 && !hostile) || argc > 3) {
    std::fprintf(stderr, "usage: make_test_jpegs OUTDIR [--hostile]\n");
    return 2;
  }
  std::string out = argv[1];
  if (!MakeDir(out)) return 1;
  for (const auto& named : pcrfs::testdata::StandardTestJpegs()) {
    auto jpeg = pcrfs::testdata::MakeTestJpeg(named.spec);
    if (!jpeg) {
      std::fprintf(stderr, "make_test_jpegs: %s: %s\n", named.name.c_str(),
                   jpeg.error().ToString().c_str());
      return 1;
    }
    if (!Write(out + "/" + named.name, *jpeg)) return 1;
  }
  if (hostile && !WriteHostile(out + "/hostile")) return 1;
  return 0;
}
