#include "builder/builder_test_support.h"

#include <filesystem>
#include <random>
#include <stdexcept>

#include "builder/provenance.h"
#include "common/test_support.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::test {

namespace stdfs = std::filesystem;

void WriteTestJpegs(const std::string& root, const std::vector<std::string>& names,
                    const JpegSeries& series) {
  for (size_t i = 0; i < names.size(); ++i) {
    const int step = static_cast<int>(i);
    testdata::JpegSpec spec;
    spec.width = series.width + series.width_step * step;
    spec.height = series.height + series.height_step * step;
    spec.seed = series.seed + static_cast<uint32_t>(i);
    auto jpeg = testdata::MakeTestJpeg(spec);
    if (!jpeg) throw std::runtime_error("cannot make test JPEG " + names[i]);
    const std::string path = root + "/" + names[i];
    stdfs::create_directories(stdfs::path(path).parent_path());
    WriteAll(path, *jpeg);
  }
}

void WriteRandomFile(const std::string& path, size_t size, uint32_t seed) {
  std::vector<uint8_t> data(size);
  std::mt19937 rng(seed);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  WriteAll(path, data);
}

std::map<std::string, std::vector<uint8_t>> StoreContent(const std::string& store) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : stdfs::recursive_directory_iterator(store)) {
    const std::string rel = stdfs::relative(e.path(), store).string();
    if (e.is_regular_file() && rel != tools::kProvenanceFile) out[rel] = ReadAll(e.path());
  }
  return out;
}

tools::BuildConfig SmallBuildConfig(const std::string& src, const std::string& store) {
  tools::BuildConfig c;
  c.source = src;
  c.store = store;
  c.images_per_record = 2;
  c.quality_sample = 0;
  c.threads = 2;
  return c;
}

}  // namespace pcrfs::test
