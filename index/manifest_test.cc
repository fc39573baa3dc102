#include "index/manifest.h"

#include <gtest/gtest.h>

namespace pcrfs::index {
namespace {

Manifest Sample() {
  Manifest m;
  m.generator = "pcrfs 0.1.0";
  m.options.strip_metadata = true;
  m.options.images_per_record = 1024;
  m.options.max_input_scans = 1000;
  m.options.max_image_memory = 1ull << 30;
  m.options.max_jpeg_bytes = 1ull << 28;
  m.num_entries = 120;
  m.num_directories = 10;
  m.num_jpeg = 100;
  m.num_passthrough = 10;
  m.passthrough_by_reason = {{"not_jpeg", 7}, {"corrupt", 3}};
  m.num_records = 2;
  m.source_bytes = 1ull << 40;
  m.source_jpeg_bytes = (1ull << 40) - 5;
  for (int k = 0; k < kNumGroups; ++k) {
    m.level_bytes[k] = 1000u * (k + 1);
    m.jpeg_level_bytes[k] = 900u * (k + 1);
  }
  return m;
}

TEST(ManifestTest, RoundTrip) {
  const Manifest m = Sample();
  const std::string text = m.ToJson();
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.substr(0, 24), "{\n  \"format_version\": 2,");
  // Fixed key order: format_version first, jpeg_level_bytes last; reasons sorted.
  EXPECT_LT(text.find("\"generator\""), text.find("\"options\""));
  EXPECT_LT(text.find("\"corrupt\""), text.find("\"not_jpeg\""));
  auto back = Manifest::FromJson(text);
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->ToJson(), text);
  EXPECT_EQ(back->options.max_image_memory, m.options.max_image_memory);
  EXPECT_EQ(back->passthrough_by_reason, m.passthrough_by_reason);
  EXPECT_EQ(back->level_bytes, m.level_bytes);
  EXPECT_EQ(back->jpeg_level_bytes, m.jpeg_level_bytes);
  EXPECT_EQ(back->source_bytes, m.source_bytes);
}

TEST(ManifestTest, DeterministicOutput) { EXPECT_EQ(Sample().ToJson(), Sample().ToJson()); }

TEST(ManifestTest, RejectsOtherVersions) {
  std::string text = Sample().ToJson();
  text.replace(text.find("\"format_version\": 2"), 19, "\"format_version\": 3");
  auto m = Manifest::FromJson(text);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code(), Status::Code::kNotSupported);
  EXPECT_EQ(m.error().message(), "format version 3 is not supported (this pcrfs reads 1 to 2)");
  // Only the version matters: a v2 manifest may look nothing like v1.
  m = Manifest::FromJson("{\"format_version\": 7, \"something\": []}");
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code(), Status::Code::kNotSupported);
}

TEST(ManifestTest, RejectsMalformed) {
  const std::string good = Sample().ToJson();
  for (const std::string& bad :
       {std::string(""), std::string("{"), std::string("[]"), std::string("{}"),
        std::string("{\"format_version\": \"1\"}"), std::string("{\"format_version\": 1}"),
        good.substr(0, good.size() / 2)}) {
    auto m = Manifest::FromJson(bad);
    ASSERT_FALSE(m.has_value()) << bad;
    EXPECT_TRUE(m.error().IsCorruption()) << bad << ": " << m.error().ToString();
  }
  std::string neg = good;
  neg.replace(neg.find("\"num_jpeg\": 100"), 15, "\"num_jpeg\": -1");
  EXPECT_TRUE(Manifest::FromJson(neg).error().IsCorruption());
  std::string big = good;
  big.replace(big.find("\"num_records\": 2"), 16, "\"num_records\": 9999999999");
  EXPECT_TRUE(Manifest::FromJson(big).error().IsCorruption());
  std::string short_levels = good;
  short_levels.replace(short_levels.find("\"level_bytes\": ["), 16, "\"level_bytes\": [1,");
  EXPECT_FALSE(Manifest::FromJson(short_levels).has_value());
}

}  // namespace
}  // namespace pcrfs::index
