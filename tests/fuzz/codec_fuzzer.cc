// Fuzz target: the codec on arbitrary input (docs/design.md, "Codec", "Hostile input").
// codec::Transcode with small caps (64 MiB of libjpeg memory, 100 input scans) must return,
// never exit or abort, whatever the bytes. When it transcodes:
//   - the pieces add up to the output, and the splitter's cut points are where levels end;
//   - every level 1..10 decodes cleanly (DecodeJpeg turns any libjpeg warning into an error);
//   - when the source decodes cleanly, level 10 decodes to exactly its pixels (the lossless
//     promise); a source that transcodes always decodes, short of the decoder's own size cap.
// Images above kMaxCheckedPixels are transcoded but not decoded ten times, to keep the fuzzer
// fast on inputs that declare a large size with little data.

#include <cstdint>
#include <span>

#include "codec/decoder.h"
#include "codec/transcoder.h"
#include "tests/fuzz/fuzz_check.h"

namespace {
constexpr uint64_t kMaxCheckedPixels = uint64_t{1} << 22;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  std::span<const uint8_t> source(data, size);
  codec::TranscodeOptions options;
  options.max_memory_bytes = uint64_t{64} << 20;
  options.max_input_scans = 100;
  const codec::TranscodeResult result = codec::Transcode(source, options);
  if (!result.transcoded()) return 0;
  const codec::ProgressiveJpeg& image = result.image;
  uint64_t sum = 0;
  for (uint64_t n : image.piece_lengths) sum += n;
  FUZZ_CHECK(sum == image.bytes.size(), "pieces add up to %llu, output has %zu",
             static_cast<unsigned long long>(sum), image.bytes.size());
  FUZZ_CHECK(image.piece_lengths[0] > 0, "empty piece 1");

  auto original = codec::DecodeJpeg(source);
  if (!original) {
    // The transcoder read every coefficient without a warning; only the decoder's own size cap
    // (and memory) may stop a full decode.
    FUZZ_CHECK(original.error().code() == Status::Code::kResourceExhausted ||
                   original.error().message().find("memory") != std::string::npos,
               "transcoded, but the source does not decode: %s",
               original.error().ToString().c_str());
    return 0;
  }
  if (uint64_t{static_cast<uint32_t>(original->width)} * static_cast<uint32_t>(original->height) >
      kMaxCheckedPixels) {
    return 0;
  }
  for (int k = 1; k <= codec::kNumGroups; ++k) {
    auto level = codec::DecodeJpeg(image.Level(k));
    FUZZ_CHECK(level.has_value(), "level %d does not decode: %s", k,
               level.error().ToString().c_str());
    FUZZ_CHECK(level->width == original->width && level->height == original->height &&
                   level->components == original->components,
               "level %d has another shape", k);
    if (k == codec::kNumGroups) {
      FUZZ_CHECK(level->pixels == original->pixels, "level 10 differs from the source pixels");
    }
  }
  return 0;
}
