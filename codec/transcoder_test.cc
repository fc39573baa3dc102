#include "codec/transcoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/decoder.h"
#include "codec/scan_splitter.h"
#include "common/crc32c.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::codec {
namespace {

using testdata::JpegColor;
using testdata::JpegSpec;
using testdata::MakeTestJpeg;

std::vector<uint8_t> MustMake(const JpegSpec& spec) {
  auto jpeg = MakeTestJpeg(spec);
  EXPECT_TRUE(jpeg.has_value()) << jpeg.error().ToString();
  return jpeg ? *jpeg : std::vector<uint8_t>{};
}

bool Contains(std::span<const uint8_t> haystack, std::span<const uint8_t> needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

size_t CountOf(std::span<const uint8_t> haystack, const std::string& text) {
  std::vector<uint8_t> needle(text.begin(), text.end());
  size_t count = 0;
  auto it = haystack.begin();
  while (true) {
    it = std::search(it, haystack.end(), needle.begin(), needle.end());
    if (it == haystack.end()) return count;
    count++;
    ++it;
  }
}

// --- Every variety of the factory ---------------------------------------------------------

}  // namespace
}  // namespace pcrfs::codec

namespace pcrfs::testdata {
void PrintTo(const NamedJpegSpec& spec, std::ostream* os) { *os << spec.name; }
}  // namespace pcrfs::testdata

namespace pcrfs::codec {
namespace {

class VarietyTest : public ::testing::TestWithParam<testdata::NamedJpegSpec> {};

TEST_P(VarietyTest, TranscodesIntoTenGroupsAndLevelTenIsLossless) {
  const JpegSpec& spec = GetParam().spec;
  std::vector<uint8_t> source = MustMake(spec);
  ASSERT_FALSE(source.empty());
  TranscodeResult result = Transcode(source, TranscodeOptions{});
  ASSERT_TRUE(result.transcoded())
      << "reason " << static_cast<int>(result.reason) << ": " << result.detail;
  const ProgressiveJpeg& image = result.image;

  uint64_t sum = 0;
  for (uint64_t length : image.piece_lengths) sum += length;
  EXPECT_EQ(sum, image.bytes.size());
  ASSERT_GT(image.piece_lengths[0], 4u);
  EXPECT_EQ(image.piece(1)[0], 0xFF);
  EXPECT_EQ(image.piece(1)[1], 0xD8);
  // Each later piece starts with the marker segment that starts its first scan.
  for (int g = 2; g <= kNumGroups; g++) {
    auto piece = image.piece(g);
    if (piece.empty()) continue;
    ASSERT_GE(piece.size(), 2u);
    EXPECT_EQ(piece[0], 0xFF) << "group " << g;
    EXPECT_TRUE(piece[1] == 0xC4 || piece[1] == 0xDA || piece[1] == 0xDD) << "group " << g;
  }
  EXPECT_FALSE(image.piece(10).empty()) << "group 10 completes every image";
  if (spec.color == JpegColor::kGray) {
    for (int g : {3, 4, 8, 9}) EXPECT_TRUE(image.piece(g).empty()) << "group " << g;
    for (int g : {1, 2, 5, 6, 7, 10}) EXPECT_FALSE(image.piece(g).empty()) << "group " << g;
  } else {
    for (int g = 1; g <= kNumGroups; g++) {
      bool luma_only = g == 3 || g == 4 || g == 8 || g == 9;
      bool has_chroma = spec.color == JpegColor::kYCbCr || spec.color == JpegColor::kYCCK;
      EXPECT_EQ(image.piece(g).empty(), luma_only && !has_chroma) << "group " << g;
    }
  }

  auto source_pixels = DecodeJpeg(source);
  ASSERT_TRUE(source_pixels) << source_pixels.error().ToString();
  size_t previous_size = 0;
  for (int k = 1; k <= kNumGroups; k++) {
    SCOPED_TRACE(k);
    std::vector<uint8_t> level = image.Level(k);
    EXPECT_GE(level.size(), previous_size);
    previous_size = level.size();
    ASSERT_GE(level.size(), 4u);
    EXPECT_EQ(level[level.size() - 2], 0xFF);
    EXPECT_EQ(level[level.size() - 1], 0xD9);
    // Every level is a well-formed JPEG with no restart markers.
    auto scans = FindScans(level);
    ASSERT_TRUE(scans) << scans.error().ToString();
    for (const ScanExtent& scan : *scans) {
      for (size_t i = scan.data_begin; i + 1 < scan.data_end; i++) {
        ASSERT_FALSE(level[i] == 0xFF && level[i + 1] >= 0xD0 && level[i + 1] <= 0xD7);
      }
    }
    auto decoded = DecodeJpeg(level);
    ASSERT_TRUE(decoded) << decoded.error().ToString();
    EXPECT_EQ(decoded->width, spec.width);
    EXPECT_EQ(decoded->height, spec.height);
    EXPECT_EQ(decoded->components, source_pixels->components);
    if (k == kNumGroups) {
      EXPECT_EQ(level.size(), image.bytes.size() + 2);
      EXPECT_TRUE(decoded->pixels == source_pixels->pixels) << "level 10 is not lossless";
    }
  }
  // Progressive (SOF2), Huffman-coded output, whatever the source was.
  EXPECT_EQ(CountOf(image.piece(1), std::string("\xFF\xC2", 2)), 1u);
  EXPECT_EQ(CountOf(image.piece(1), std::string("\xFF\xCA", 2)), 0u);
}

TEST_P(VarietyTest, IsDeterministic) {
  std::vector<uint8_t> source = MustMake(GetParam().spec);
  TranscodeResult a = Transcode(source, TranscodeOptions{});
  TranscodeResult b = Transcode(source, TranscodeOptions{});
  ASSERT_TRUE(a.transcoded());
  ASSERT_TRUE(b.transcoded());
  EXPECT_TRUE(a.image.bytes == b.image.bytes);
  EXPECT_EQ(a.image.piece_lengths, b.image.piece_lengths);
}

INSTANTIATE_TEST_SUITE_P(Factory, VarietyTest, ::testing::ValuesIn(testdata::StandardTestJpegs()),
                         [](const ::testing::TestParamInfo<testdata::NamedJpegSpec>& info) {
                           return info.param.TestName();
                         });

// --- Sizes, metadata, golden output ------------------------------------------------------------

TEST(TranscoderTest, LowLevelsAreMuchSmallerThanTheSource) {
  JpegSpec spec;
  spec.width = 640;
  spec.height = 480;
  std::vector<uint8_t> source = MustMake(spec);
  TranscodeResult result = Transcode(source, TranscodeOptions{});
  ASSERT_TRUE(result.transcoded());
  EXPECT_LT(result.image.Level(1).size(), source.size() / 2);
  EXPECT_LT(result.image.Level(5).size(), result.image.Level(10).size());
}

TEST(TranscoderTest, KeepsMarkersByDefaultAndStripsThemOnRequest) {
  JpegSpec spec;
  spec.width = 120;
  spec.height = 90;
  spec.icc = true;
  spec.exif = true;
  spec.comment = true;
  std::vector<uint8_t> source = MustMake(spec);
  std::vector<uint8_t> icc = testdata::TestIccPayload();
  std::vector<uint8_t> exif = testdata::TestExifPayload();
  const std::string comment = "pcrfs test image";
  ASSERT_TRUE(Contains(source, icc));

  TranscodeResult kept = Transcode(source, TranscodeOptions{});
  ASSERT_TRUE(kept.transcoded());
  EXPECT_TRUE(Contains(kept.image.piece(1), icc));
  EXPECT_TRUE(Contains(kept.image.piece(1), exif));
  EXPECT_EQ(CountOf(kept.image.piece(1), comment), 1u);
  // libjpeg writes its own JFIF header; the source's is not copied a second time.
  EXPECT_EQ(CountOf(kept.image.bytes, std::string("JFIF\0", 5)), 1u);

  TranscodeOptions strip;
  strip.strip_metadata = true;
  TranscodeResult stripped = Transcode(source, strip);
  ASSERT_TRUE(stripped.transcoded());
  EXPECT_FALSE(Contains(stripped.image.bytes, icc));
  EXPECT_FALSE(Contains(stripped.image.bytes, exif));
  EXPECT_EQ(CountOf(stripped.image.bytes, comment), 0u);
  EXPECT_LT(stripped.image.piece_lengths[0], kept.image.piece_lengths[0]);
  // Same pixels either way.
  auto a = DecodeJpeg(kept.image.Level(10));
  auto b = DecodeJpeg(stripped.image.Level(10));
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->pixels == b->pixels);
  for (int g = 2; g <= kNumGroups; g++) {
    EXPECT_EQ(kept.image.piece_lengths[g - 1], stripped.image.piece_lengths[g - 1]);
  }
}

TEST(TranscoderTest, CmykKeepsOneAdobeMarker) {
  JpegSpec spec;
  spec.color = JpegColor::kCMYK;
  spec.h_samp = {1, 1, 1, 1};
  spec.v_samp = {1, 1, 1, 1};
  std::vector<uint8_t> source = MustMake(spec);
  ASSERT_EQ(CountOf(source, "Adobe"), 1u);
  TranscodeResult result = Transcode(source, TranscodeOptions{});
  ASSERT_TRUE(result.transcoded());
  EXPECT_EQ(CountOf(result.image.bytes, "Adobe"), 1u);
}

// Pins the exact output of libjpeg-turbo 2.1.5 (Debian 12) for one fixed input: our scan script,
// optimized Huffman tables and marker copying. If libjpeg-turbo or the factory changes, check
// the new output (the other tests) and update the digest.
TEST(TranscoderTest, GoldenDigest) {
  JpegSpec spec;
  spec.width = 333;
  spec.height = 250;
  spec.h_samp = {2, 1, 1, 0};
  spec.v_samp = {2, 1, 1, 0};
  spec.seed = 7;
  std::vector<uint8_t> source = MustMake(spec);
  TranscodeResult result = Transcode(source, TranscodeOptions{});
  ASSERT_TRUE(result.transcoded());
  std::vector<uint8_t> level = result.image.Level(10);
  // The source pins the factory and libjpeg-turbo's compressor; the level pins the transcoder.
  EXPECT_EQ(source.size(), 17684u);
  EXPECT_EQ(crc32c::Value(source), 0x5ed9227bu);
  EXPECT_EQ(level.size(), 15231u);
  EXPECT_EQ(crc32c::Value(level), 0xb269a7e9u);
}

// --- Hostile input --------------------------------------------------------------------------

std::vector<uint8_t> SmallBaseline() {
  JpegSpec spec;
  spec.width = 96;
  spec.height = 64;
  return MustMake(spec);
}

TEST(TranscoderHostileTest, Empty) {
  TranscodeResult result = Transcode({}, TranscodeOptions{});
  EXPECT_EQ(result.reason, PassthroughReason::kEmpty);
  EXPECT_EQ(result.reason, PassthroughReason::kEmpty);
}

TEST(TranscoderHostileTest, NotJpeg) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13};
  EXPECT_EQ(Transcode(png, TranscodeOptions{}).reason, PassthroughReason::kNotJpeg);
  EXPECT_FALSE(LooksLikeJpeg(png));
  std::vector<uint8_t> two = {0xFF, 0xD8};
  EXPECT_EQ(Transcode(two, TranscodeOptions{}).reason, PassthroughReason::kNotJpeg);
  EXPECT_TRUE(LooksLikeJpeg(SmallBaseline()));
}

TEST(TranscoderHostileTest, RandomBytesNeverCrash) {
  std::mt19937 rng(42);
  for (int i = 0; i < 200; i++) {
    std::vector<uint8_t> data(1 + rng() % 2000);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    if (i % 2 == 0 && data.size() >= 3) {
      data[0] = 0xFF;
      data[1] = 0xD8;
      data[2] = 0xFF;
    }
    TranscodeResult result = Transcode(data, TranscodeOptions{});
    EXPECT_FALSE(result.transcoded());
    EXPECT_FALSE(result.detail.empty());
  }
}

TEST(TranscoderHostileTest, Truncated) {
  std::vector<uint8_t> jpeg = SmallBaseline();
  for (size_t keep : {jpeg.size() - 2, jpeg.size() * 3 / 4, jpeg.size() / 2, size_t{300}}) {
    std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<ptrdiff_t>(keep));
    TranscodeResult result = Transcode(cut, TranscodeOptions{});
    EXPECT_EQ(result.reason, PassthroughReason::kTruncated) << keep << ": " << result.detail;
  }
}

TEST(TranscoderHostileTest, TrailingData) {
  std::vector<uint8_t> jpeg = SmallBaseline();
  for (const std::string& tail :
       {std::string("x"), std::string("garbage after EOI"), std::string("\xFF\xD8\xFF\xE0", 4)}) {
    std::vector<uint8_t> data = jpeg;
    data.insert(data.end(), tail.begin(), tail.end());
    TranscodeResult result = Transcode(data, TranscodeOptions{});
    EXPECT_EQ(result.reason, PassthroughReason::kTrailingData) << result.detail;
    EXPECT_EQ(result.reason, PassthroughReason::kTrailingData);
  }
}

TEST(TranscoderHostileTest, TooManyScans) {
  JpegSpec spec;
  spec.progressive = true;
  std::vector<uint8_t> jpeg = MustMake(spec);  // libjpeg's 10-scan progression
  TranscodeOptions options;
  options.max_input_scans = 3;
  TranscodeResult result = Transcode(jpeg, options);
  EXPECT_EQ(result.reason, PassthroughReason::kTooManyScans) << result.detail;
  options.max_input_scans = 10;
  EXPECT_TRUE(Transcode(jpeg, options).transcoded());
}

// Patches the SOF of a small baseline JPEG to declare width x height.
std::vector<uint8_t> WithDeclaredSize(std::vector<uint8_t> jpeg, int width, int height) {
  for (size_t i = 2; i + 9 < jpeg.size(); i++) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = static_cast<uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(height);
      jpeg[i + 7] = static_cast<uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(width);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF0";
  return jpeg;
}

TEST(TranscoderHostileTest, HugeDeclaredSizeFailsQuickly) {
  std::vector<uint8_t> jpeg = WithDeclaredSize(SmallBaseline(), 65000, 65000);
  auto start = std::chrono::steady_clock::now();
  TranscodeResult result = Transcode(jpeg, TranscodeOptions{});
  EXPECT_FALSE(result.transcoded());
  EXPECT_TRUE(result.reason == PassthroughReason::kTooLarge ||
              result.reason == PassthroughReason::kTruncated ||
              result.reason == PassthroughReason::kCorrupt)
      << "reason " << static_cast<int>(result.reason) << ": " << result.detail;

  TranscodeOptions small;
  small.max_memory_bytes = 1 << 20;
  result = Transcode(jpeg, small);
  EXPECT_EQ(result.reason, PassthroughReason::kTooLarge) << result.detail;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The unpatched file fits in 1 MiB.
  EXPECT_TRUE(Transcode(SmallBaseline(), small).transcoded());
}

// A corruption test in the LevelDB manner: flip bytes of a real file. Each result is either a
// passthrough, or a transcode whose level 10 decodes exactly as the damaged source does.
TEST(TranscoderHostileTest, FlippedBytesArePassthroughOrLossless) {
  JpegSpec spec;
  spec.width = 80;
  spec.height = 60;
  for (bool progressive : {false, true}) {
    spec.progressive = progressive;
    std::vector<uint8_t> jpeg = MustMake(spec);
    std::mt19937 rng(progressive ? 7 : 3);
    int passthrough = 0;
    for (int i = 0; i < 150; i++) {
      std::vector<uint8_t> damaged = jpeg;
      size_t pos = 2 + rng() % (damaged.size() - 4);
      damaged[pos] ^= static_cast<uint8_t>(1 + rng() % 255);
      TranscodeResult result = Transcode(damaged, TranscodeOptions{});
      if (!result.transcoded()) {
        passthrough++;
        EXPECT_FALSE(result.detail.empty());
        continue;
      }
      auto a = DecodeJpeg(damaged);
      auto b = DecodeJpeg(result.image.Level(10));
      ASSERT_TRUE(a.has_value()) << "transcoded a source that does not decode cleanly";
      ASSERT_TRUE(b.has_value()) << b.error().ToString();
      EXPECT_TRUE(a->pixels == b->pixels) << "flip at " << pos;
    }
    EXPECT_GT(passthrough, 10);
  }
}

TEST(TranscoderHostileTest, CorruptMarkerInEntropyData) {
  std::vector<uint8_t> jpeg = SmallBaseline();
  jpeg[jpeg.size() / 2 + 100 < jpeg.size() - 2 ? jpeg.size() / 2 + 100 : jpeg.size() / 2] = 0xFF;
  jpeg[jpeg.size() / 2 + 101 < jpeg.size() - 2 ? jpeg.size() / 2 + 101 : jpeg.size() / 2 + 1] =
      0xC8;
  TranscodeResult result = Transcode(jpeg, TranscodeOptions{});
  EXPECT_EQ(result.reason, PassthroughReason::kCorrupt) << result.detail;
}

// Found by tests/fuzz/codec_fuzzer: a progressive source that lacks some of its scans (here our
// own level 3) decodes with libjpeg's block smoothing; a transcoded copy has every scan and would
// decode without it, so level 10 would not be the source's pixels. It must stay a passthrough.
TEST(TranscoderHostileTest, IncompleteProgressiveSourceIsPassthrough) {
  JpegSpec spec;
  spec.width = 17;
  spec.height = 9;
  TranscodeResult full = Transcode(MustMake(spec), TranscodeOptions{});
  ASSERT_TRUE(full.transcoded()) << full.detail;
  for (int k = 1; k < kNumGroups; k++) {
    TranscodeResult partial = Transcode(full.image.Level(k), TranscodeOptions{});
    EXPECT_EQ(partial.reason, PassthroughReason::kIncomplete) << "level " << k;
    EXPECT_NE(partial.detail.find("without all its scans"), std::string::npos) << partial.detail;
  }
  TranscodeResult again = Transcode(full.image.Level(kNumGroups), TranscodeOptions{});
  ASSERT_TRUE(again.transcoded()) << again.detail;
  auto a = DecodeJpeg(full.image.Level(kNumGroups));
  auto b = DecodeJpeg(again.image.Level(kNumGroups));
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_TRUE(a->pixels == b->pixels);
}

// --- ScanSplitter ------------------------------------------------------------------------

TEST(ScanSplitterTest, FindsEveryScanAndRejectsBrokenFiles) {
  TranscodeResult result = Transcode(SmallBaseline(), TranscodeOptions{});
  ASSERT_TRUE(result.transcoded());
  std::vector<uint8_t> full = result.image.Level(10);
  auto scans = FindScans(full);
  ASSERT_TRUE(scans);
  EXPECT_EQ(scans->size(), 10u);
  EXPECT_EQ(scans->back().data_end + 2, full.size());

  std::vector<uint8_t> groups = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto split = SplitIntoGroups(full, groups);
  ASSERT_TRUE(split);
  EXPECT_TRUE(split->bytes == result.image.bytes);
  EXPECT_EQ(split->piece_lengths, result.image.piece_lengths);

  // All scans in group 1 and 10: the pieces between are empty.
  std::vector<uint8_t> lumped = {1, 1, 1, 1, 1, 1, 1, 1, 1, 10};
  split = SplitIntoGroups(full, lumped);
  ASSERT_TRUE(split);
  for (int g = 2; g <= 9; g++) EXPECT_EQ(split->piece_lengths[g - 1], 0u);

  EXPECT_FALSE(SplitIntoGroups(full, std::vector<uint8_t>(9, 1)));  // wrong scan count
  EXPECT_FALSE(SplitIntoGroups(full, std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 10, 9}));
  std::vector<uint8_t> no_eoi(full.begin(), full.end() - 2);
  EXPECT_FALSE(FindScans(no_eoi));
  std::vector<uint8_t> extra = full;
  extra.push_back(0);
  EXPECT_FALSE(FindScans(extra));
  for (size_t cut = 0; cut < full.size(); cut += 97) {
    std::vector<uint8_t> truncated(full.begin(), full.begin() + static_cast<ptrdiff_t>(cut));
    EXPECT_FALSE(FindScans(truncated)) << cut;
  }
  std::vector<uint8_t> bad_length = full;
  bad_length[4] = 0xFF;  // the first segment's length runs past the end
  bad_length[5] = 0xFF;
  EXPECT_FALSE(FindScans(bad_length));
}

TEST(DecoderTest, RejectsTruncatedAndEmpty) {
  std::vector<uint8_t> jpeg = SmallBaseline();
  EXPECT_FALSE(DecodeJpeg({}));
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<ptrdiff_t>(jpeg.size() / 2));
  auto decoded = DecodeJpeg(cut);
  ASSERT_FALSE(decoded);
  EXPECT_NE(decoded.error().message().find("Premature end"), std::string::npos)
      << decoded.error().ToString();
  auto ok = DecodeJpeg(jpeg);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->components, 3);
  EXPECT_EQ(ok->pixels.size(), size_t{96} * 64 * 3);
}

}  // namespace
}  // namespace pcrfs::codec
