#include "codec/jpeg_error.h"

#include <cstdio>
#include <cstring>

namespace pcrfs::codec {
namespace {

// Records the message of the current code and jumps back to the caller's setjmp.
[[noreturn]] void StopWithMessage(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  err->msg_code = err->pub.msg_code;
  (*err->pub.format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void ErrorExit(j_common_ptr cinfo) { StopWithMessage(cinfo); }

void EmitMessage(j_common_ptr cinfo, int msg_level) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (msg_level < 0) {
    // A warning: corrupt data that libjpeg would silently "repair".
    if (err->warnings_fatal && err->pub.msg_code != err->tolerated_warning) {
      StopWithMessage(cinfo);
    }
    err->pub.num_warnings++;
  }
  // Trace messages (msg_level >= 0) are dropped.
}

// Nothing is ever printed: messages travel back in JpegErrorManager::message.
void OutputMessage(j_common_ptr) {}

[[noreturn]] void StopScanCap(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  err->msg_code = kScanCapMessageCode;
  std::longjmp(err->jump, 1);
}

// Blocks the current scan decodes: a non-interleaved scan covers its component's blocks, an
// interleaved one every block of its MCUs.
uint64_t BlocksInScan(j_decompress_ptr dinfo) {
  if (dinfo->comps_in_scan == 1 && dinfo->cur_comp_info[0] != nullptr) {
    return uint64_t{dinfo->cur_comp_info[0]->width_in_blocks} *
           dinfo->cur_comp_info[0]->height_in_blocks;
  }
  return uint64_t{dinfo->MCUs_per_row} * dinfo->MCU_rows_in_scan *
         static_cast<uint64_t>(dinfo->blocks_in_MCU);
}

// Called by libjpeg before each unit of input work (an iMCU row, or a marker); a new scan has
// already started (input_scan_number counted up, the scan's components set) when it sees it.
void ScanCapMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* progress = reinterpret_cast<ScanCapProgress*>(cinfo->progress);
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (dinfo->input_scan_number > progress->max_scans) {
    std::snprintf(err->message, sizeof(err->message), "more than %d scans in the source",
                  progress->max_scans);
    StopScanCap(cinfo);
  }
  if (dinfo->input_scan_number != progress->counted_scan && dinfo->global_state >= 201) {
    // 201 = DSTATE_INHEADER: past it, a scan header has been read.
    progress->counted_scan = dinfo->input_scan_number;
    progress->blocks += BlocksInScan(dinfo);
    if (progress->blocks > progress->max_blocks) {
      std::snprintf(err->message, sizeof(err->message),
                    "scans cover more than %llu blocks in %d scans (a scan bomb)",
                    static_cast<unsigned long long>(progress->max_blocks),
                    dinfo->input_scan_number);
      StopScanCap(cinfo);
    }
  }
}

}  // namespace

jpeg_error_mgr* InitJpegErrorManager(JpegErrorManager* err, bool warnings_fatal) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = ErrorExit;
  err->pub.emit_message = EmitMessage;
  err->pub.output_message = OutputMessage;
  err->warnings_fatal = warnings_fatal;
  err->tolerated_warning = -1;
  err->msg_code = 0;
  err->message[0] = '\0';
  return &err->pub;
}

void InitScanCapProgress(ScanCapProgress* progress, int max_scans) {
  std::memset(progress, 0, sizeof(*progress));
  progress->pub.progress_monitor = ScanCapMonitor;
  progress->max_scans = max_scans;
  progress->max_blocks =
      static_cast<uint64_t>(max_scans < 0 ? 0 : max_scans) * kScanBlocksPerAllowedScan;
  progress->blocks = 0;
  progress->counted_scan = 0;
}

PassthroughReason ReasonForJpegMessage(int msg_code) {
  switch (msg_code) {
    case kScanCapMessageCode:
      return PassthroughReason::kTooManyScans;
    case kIncompleteMessageCode:
      return PassthroughReason::kIncomplete;
    case JWRN_JPEG_EOF:
    case JERR_INPUT_EOF:
    case JERR_INPUT_EMPTY:
      return PassthroughReason::kTruncated;
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW:
      return PassthroughReason::kTooLarge;
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_NOT_COMPILED:
    case JERR_ARITH_NOTIMPL:
    case JERR_COMPONENT_COUNT:
    case JERR_FRACT_SAMPLE_NOTIMPL:
      return PassthroughReason::kUnsupported;
    case JERR_NO_SOI:
      return PassthroughReason::kNotJpeg;
    default:
      return PassthroughReason::kCorrupt;
  }
}

}  // namespace pcrfs::codec
