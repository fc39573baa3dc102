#include "codec/scan_script.h"

namespace pcrfs::codec {
namespace {

constexpr int kMaxCompsInScan = 4;   // MAX_COMPS_IN_SCAN
constexpr int kMaxBlocksInMcu = 10;  // C_MAX_BLOCKS_IN_MCU and D_MAX_BLOCKS_IN_MCU
constexpr int kCrIndex = 2;          // libjpeg's progression sends Cr before Cb
constexpr int kCbIndex = 1;

void AddScan(ScanScript* script, int group, int component, int ss, int se, int ah, int al) {
  jpeg_scan_info& scan = script->scans[script->num_scans];
  scan.comps_in_scan = 1;
  scan.component_index[0] = component;
  scan.Ss = ss;
  scan.Se = se;
  scan.Ah = ah;
  scan.Al = al;
  script->group[script->num_scans] = static_cast<uint8_t>(group);
  script->num_scans++;
}

// DC scans of every component, interleaved greedily in component order.
void AddDcScans(ScanScript* script, int group, int num_components,
                const ComponentSampling* sampling, int ah, int al) {
  int blocks = 0;
  jpeg_scan_info* scan = nullptr;
  for (int ci = 0; ci < num_components; ci++) {
    int component_blocks = sampling[ci].h * sampling[ci].v;
    // A lone component is a non-interleaved scan: one block per MCU, whatever its sampling.
    if (scan != nullptr && scan->comps_in_scan < kMaxCompsInScan &&
        blocks + component_blocks <= kMaxBlocksInMcu) {
      scan->component_index[scan->comps_in_scan++] = ci;
      blocks += component_blocks;
      continue;
    }
    AddScan(script, group, ci, 0, 0, ah, al);
    scan = &script->scans[script->num_scans - 1];
    blocks = component_blocks;
  }
}

}  // namespace

bool IsChromaComponent(J_COLOR_SPACE color_space, int num_components, int index) {
  bool ycc = (color_space == JCS_YCbCr && num_components == 3) ||
             (color_space == JCS_YCCK && num_components == 4);
  return ycc && (index == kCbIndex || index == kCrIndex);
}

bool BuildScanScript(J_COLOR_SPACE color_space, int num_components,
                     const ComponentSampling* sampling, ScanScript* script) {
  *script = ScanScript{};
  if (num_components < 1 || num_components > MAX_COMPONENTS) return false;
  for (int ci = 0; ci < num_components; ci++) {
    if (sampling[ci].h < 1 || sampling[ci].h > 4 || sampling[ci].v < 1 || sampling[ci].v > 4) {
      return false;
    }
  }
  auto add_luma = [&](int group, int ss, int se, int ah, int al) {
    for (int ci = 0; ci < num_components; ci++) {
      if (!IsChromaComponent(color_space, num_components, ci)) {
        AddScan(script, group, ci, ss, se, ah, al);
      }
    }
  };
  auto add_chroma = [&](int group, int ci, int ah, int al) {
    if (IsChromaComponent(color_space, num_components, ci)) {
      AddScan(script, group, ci, 1, 63, ah, al);
    }
  };
  AddDcScans(script, 1, num_components, sampling, 0, 1);
  add_luma(2, 1, 5, 0, 2);
  add_chroma(3, kCrIndex, 0, 1);
  add_chroma(4, kCbIndex, 0, 1);
  add_luma(5, 6, 63, 0, 2);
  add_luma(6, 1, 63, 2, 1);
  AddDcScans(script, 7, num_components, sampling, 1, 0);
  add_chroma(8, kCrIndex, 1, 0);
  add_chroma(9, kCbIndex, 1, 0);
  add_luma(10, 1, 63, 1, 0);
  return true;
}

}  // namespace pcrfs::codec
