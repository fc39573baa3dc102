// Our progressive scan script: for any component count and colour space, the scans to write and
// the group (1..10) each scan belongs to. The mapping is documented in docs/format.md ("Scan
// groups").
//
// Components are "chroma" if they are Cb or Cr of a YCbCr or YCCK image; every other component
// is "luma-like" and follows the Y schedule of libjpeg's standard YCbCr progression:
//   group 1  DC of every component, Al=1 (interleaved, split when a scan would exceed 4
//            components or 10 blocks per MCU)
//   group 2  luma-like AC 1-5, Al=2          group 3  Cr AC 1-63, Al=1
//   group 4  Cb AC 1-63, Al=1                group 5  luma-like AC 6-63, Al=2
//   group 6  luma-like AC 1-63, Ah=2 Al=1    group 7  DC refinement, Ah=1 Al=0
//   group 8  Cr AC refinement, Ah=1 Al=0     group 9  Cb AC refinement, Ah=1 Al=0
//   group 10 luma-like AC refinement, Ah=1 Al=0
// So group 10 always completes every bit of every coefficient, and level k means the same luma
// precision for every colour space.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "codec/libjpeg.h"

namespace pcrfs::codec {

// Up to MAX_COMPONENTS (10) components: at most 2 x 10 DC scans and 4 x 10 AC scans.
inline constexpr int kMaxScriptScans = 64;

// Plain data with no destructor, so it may live in a function that uses setjmp.
struct ScanScript {
  int num_scans = 0;
  std::array<jpeg_scan_info, kMaxScriptScans> scans{};
  std::array<uint8_t, kMaxScriptScans> group{};  // group (1..10) of scans[i]; non-decreasing
};
static_assert(std::is_trivially_destructible_v<ScanScript>);

struct ComponentSampling {
  int h = 1;  // h_samp_factor, 1..4
  int v = 1;  // v_samp_factor, 1..4
};

// Builds the script. Returns false (and num_scans == 0) if num_components is outside
// 1..MAX_COMPONENTS or a sampling factor is outside 1..4.
bool BuildScanScript(J_COLOR_SPACE color_space, int num_components,
                     const ComponentSampling* sampling, ScanScript* script);

// True if component `index` of an image in `color_space` gets the chroma schedule.
bool IsChromaComponent(J_COLOR_SPACE color_space, int num_components, int index);

}  // namespace pcrfs::codec
