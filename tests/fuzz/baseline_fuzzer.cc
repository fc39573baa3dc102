// Fuzz target: codec::ToBaseline (the served form of -o form=baseline) on arbitrary input, which
// stands for a level whose stored bytes are damaged. It must return, never exit or abort. When
// it returns a file:
//   - the input's coefficients read cleanly and equal the output's (the form's promise);
//   - converting the output again gives the same bytes;
//   - if the input decodes cleanly (DecodeJpeg turns any libjpeg warning into an error), so does
//     the output, short of the decoder's own size cap.
// Seeds: make_fuzz_seeds' codec corpus (sources and levels 3 and 10 of our transcodes).

#include <cstdint>
#include <span>

#include "codec/baseline.h"
#include "codec/decoder.h"
#include "tests/fuzz/fuzz_check.h"

namespace {
constexpr uint64_t kMaxCheckedPixels = uint64_t{1} << 22;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  std::span<const uint8_t> input(data, size);
  auto baseline = codec::ToBaseline(input);
  if (!baseline) {
    FUZZ_CHECK(!baseline.error().message().empty(), "an error without a message");
    return 0;
  }
  auto want = codec::ReadCoefficients(input);
  FUZZ_CHECK(want.has_value(), "converted, but the input's coefficients do not read: %s",
             want.error().ToString().c_str());
  auto got = codec::ReadCoefficients(*baseline);
  FUZZ_CHECK(got.has_value(), "the output's coefficients do not read: %s",
             got.error().ToString().c_str());
  FUZZ_CHECK(*want == *got, "the output's coefficients differ from the input's");
  auto again = codec::ToBaseline(*baseline);
  FUZZ_CHECK(again.has_value() && *again == *baseline, "converting the output changes it");
  if (uint64_t{got->width} * got->height > kMaxCheckedPixels) return 0;
  // The form promises the input's coefficients, so the output decodes whenever the input does (an
  // input that libjpeg cannot decode, e.g. with fractional sampling, converts to one it cannot
  // decode either).
  if (!codec::DecodeJpeg(input).has_value()) return 0;
  auto decoded = codec::DecodeJpeg(*baseline);
  FUZZ_CHECK(decoded.has_value() || decoded.error().code() == Status::Code::kResourceExhausted,
             "the input decodes, the output does not: %s", decoded.error().ToString().c_str());
  return 0;
}
