// libjpeg glue that keeps the process alive: an error manager whose error_exit (and, when asked,
// whose warnings) longjmp back to the caller instead of calling exit(), with libjpeg's formatted
// message kept for reports; and a progress monitor that caps the number of input scans.
//
// Contract for users: call setjmp(err.jump) in a small C-style function that makes all the
// libjpeg calls and holds no C++ object with a non-trivial destructor between the setjmp and
// any libjpeg call (the longjmp would skip its destructor). Do allocations outside it.
#pragma once

#include <csetjmp>

#include "codec/libjpeg.h"
#include "codec/transcoder.h"

namespace pcrfs::codec {

// Our message code for "too many input scans"; libjpeg's own codes are all >= 0.
inline constexpr int kScanCapMessageCode = -2;
// Ours for "a progressive source without all its scans" (PassthroughReason::kIncomplete).
inline constexpr int kIncompleteMessageCode = -3;

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first, so that a cinfo->err pointer is also a JpegErrorManager*
  std::jmp_buf jump;
  bool warnings_fatal;
  int msg_code;                   // code of the error or warning that stopped libjpeg
  char message[JMSG_LENGTH_MAX];  // its formatted text
};

// Fills in `err` and returns &err->pub, to be stored in cinfo.err before jpeg_create_*.
// With warnings_fatal, any warning (emit_message with level < 0) longjmps like an error.
jpeg_error_mgr* InitJpegErrorManager(JpegErrorManager* err, bool warnings_fatal);

struct ScanCapProgress {
  jpeg_progress_mgr pub;  // first, so that cinfo->progress is also a ScanCapProgress*
  int max_scans;
};

// Fills in `progress` for a decompressor: once the decompressor reaches scan max_scans + 1, it
// stops with msg_code kScanCapMessageCode (as djpeg -maxscans does). Store &progress->pub in
// cinfo.progress; REQUIRES: cinfo.err is a JpegErrorManager.
void InitScanCapProgress(ScanCapProgress* progress, int max_scans);

// The passthrough verdict for the libjpeg message code (or kScanCapMessageCode) that stopped a
// transcode.
PassthroughReason ReasonForJpegMessage(int msg_code);

}  // namespace pcrfs::codec
