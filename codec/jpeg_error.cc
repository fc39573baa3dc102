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
    if (err->warnings_fatal) StopWithMessage(cinfo);
    err->pub.num_warnings++;
  }
  // Trace messages (msg_level >= 0) are dropped.
}

// Nothing is ever printed: messages travel back in JpegErrorManager::message.
void OutputMessage(j_common_ptr) {}

void ScanCapMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* progress = reinterpret_cast<ScanCapProgress*>(cinfo->progress);
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > progress->max_scans) {
    auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
    err->msg_code = kScanCapMessageCode;
    std::snprintf(err->message, sizeof(err->message), "more than %d scans in the source",
                  progress->max_scans);
    std::longjmp(err->jump, 1);
  }
}

}  // namespace

jpeg_error_mgr* InitJpegErrorManager(JpegErrorManager* err, bool warnings_fatal) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = ErrorExit;
  err->pub.emit_message = EmitMessage;
  err->pub.output_message = OutputMessage;
  err->warnings_fatal = warnings_fatal;
  err->msg_code = 0;
  err->message[0] = '\0';
  return &err->pub;
}

void InitScanCapProgress(ScanCapProgress* progress, int max_scans) {
  std::memset(progress, 0, sizeof(*progress));
  progress->pub.progress_monitor = ScanCapMonitor;
  progress->max_scans = max_scans;
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
      return PassthroughReason::kUnsupported;
    case JERR_NO_SOI:
      return PassthroughReason::kNotJpeg;
    default:
      return PassthroughReason::kCorrupt;
  }
}

}  // namespace pcrfs::codec
