// The part of a large image the quality sample measures: its centred window, cut losslessly
// (DCT coefficients copied, never decoded to pixels), so PSNR and MS-SSIM cost the same for a
// 24-megapixel photo as for a quarter-megapixel one (issue 46: 24 s and 1.5 GB for one
// 6000x4000 photo, measured whole; 34-44% more build time with 1024x1024 windows, 7-9% with
// 512x512, for photos that are all sampled).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"

namespace pcrfs::tools {

// Images with a side longer than this are measured on a centred window at most this many
// pixels wide and high (docs/quality.md, "Large images"). An ImageNet photo (about 500x375)
// is measured whole.
inline constexpr int kQualityWindowSide = 512;

// A JPEG of the centred window of `jpeg` at most max_side x max_side pixels, its edges on whole
// MCUs (a side not longer than max_side is kept whole), holding exactly the source's DCT
// coefficients and quantization tables there (a sequential JPEG with standard Huffman tables,
// no markers but what the colour space needs). std::nullopt when both sides fit: nothing to
// cut. Memory: the source's coefficients (what transcoding it takes) and the window's.
// Errors: Corruption with libjpeg's message (any warning counts) for a JPEG it cannot read.
Result<std::optional<std::vector<uint8_t>>> CutCentredWindow(std::span<const uint8_t> jpeg,
                                                             int max_side);

}  // namespace pcrfs::tools
