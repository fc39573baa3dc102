// libjpeg glue that keeps the process alive: an error manager whose error_exit (and, when asked,
// whose warnings) longjmp back to the caller instead of calling exit(), with libjpeg's formatted
// message kept for reports; and a progress monitor that caps the number of input scans.
//
// Contract for users: call setjmp(err.jump) in a small C-style function that makes all the
// libjpeg calls and holds no C++ object with a non-trivial destructor between the setjmp and
// any libjpeg call (the longjmp would skip its destructor). Do allocations outside it.
#pragma once

#include <csetjmp>
#include <cstdint>

#include "codec/libjpeg.h"
#include "codec/passthrough_reason.h"

namespace pcrfs::codec {

// Our message code for "too many input scans"; libjpeg's own codes are all >= 0.
inline constexpr int kScanCapMessageCode = -2;
// Ours for "a progressive source without all its scans" (PassthroughReason::kIncomplete).
inline constexpr int kIncompleteMessageCode = -3;

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first, so that a cinfo->err pointer is also a JpegErrorManager*
  std::jmp_buf jump;
  bool warnings_fatal;
  int tolerated_warning;          // a warning code counted but never fatal; -1: none
  int msg_code;                   // code of the error or warning that stopped libjpeg
  char message[JMSG_LENGTH_MAX];  // its formatted text
};

// Fills in `err` and returns &err->pub, to be stored in cinfo.err before jpeg_create_*.
// With warnings_fatal, any warning (emit_message with level < 0) longjmps like an error, but
// the one whose code is tolerated_warning (none, as set here).
jpeg_error_mgr* InitJpegErrorManager(JpegErrorManager* err, bool warnings_fatal);

// Blocks of scan work allowed per allowed scan: with the default 1000 scans, 5 * 10^7 blocks,
// about half a second of decoding. A scan costs time in proportion to the blocks it covers,
// however little data it has (one EOB run can cover 32767 blocks), so a cap on scans alone lets
// a large image with a few hundred empty scans take minutes. Legitimate files stay far below:
// libjpeg's standard progression passes over each block about 6 times, so 5 * 10^7 blocks is
// over 350 megapixels of YCbCr 4:2:0.
inline constexpr uint64_t kScanBlocksPerAllowedScan = 50000;

struct ScanCapProgress {
  jpeg_progress_mgr pub;  // first, so that cinfo->progress is also a ScanCapProgress*
  int max_scans;
  uint64_t max_blocks;  // max_scans * kScanBlocksPerAllowedScan
  uint64_t blocks;      // blocks covered by the scans started so far
  int counted_scan;     // input_scan_number last added to `blocks`
};

// Fills in `progress` for a decompressor: once the decompressor reaches scan max_scans + 1, or
// its scans together cover more than max_scans * kScanBlocksPerAllowedScan blocks, it stops
// with msg_code kScanCapMessageCode (as djpeg -maxscans does). Store &progress->pub in
// cinfo.progress; REQUIRES: cinfo.err is a JpegErrorManager.
void InitScanCapProgress(ScanCapProgress* progress, int max_scans);

// The passthrough verdict for the libjpeg message code (or kScanCapMessageCode) that stopped a
// transcode.
PassthroughReason ReasonForJpegMessage(int msg_code);

}  // namespace pcrfs::codec
