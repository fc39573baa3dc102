// The call order follows jpegtran.c and transupp.c: error manager, create, marker setup, read
// header, read coefficients, copy critical parameters, scan script, write coefficients, copy
// markers, finish, destroy.

#include "codec/transcoder.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "codec/centred_window.h"
#include "codec/jpeg_dest.h"
#include "codec/jpeg_error.h"
#include "codec/libjpeg.h"
#include "codec/markers.h"
#include "codec/scan_script.h"
#include "codec/scan_splitter.h"

namespace pcrfs::codec {
namespace {

// Everything RunTranscode touches: plain C data only (see jpeg_error.h), so that a longjmp out of
// libjpeg skips no destructor.
struct TranscodeJob {
  // Input.
  const uint8_t* src;
  size_t src_size;
  bool strip_metadata;
  int max_input_scans;
  long max_memory;
  // libjpeg state.
  JpegErrorManager err;
  ScanCapProgress progress;
  jpeg_decompress_struct src_info;
  jpeg_compress_struct dst_info;
  // Output. dest.buffer is the caller's to free, also after a failure.
  MallocDestination dest;
  ScanScript script;
  size_t trailing_bytes;
  // The centred window (TranscodeOptions::window_side), its own error manager, so that a
  // window that cannot be cut leaves the transcode as it is. window_dest.buffer is the caller's
  // to free, as dest's.
  int window_side;
  JpegErrorManager window_err;
  jpeg_compress_struct window_info;
  MallocDestination window_dest;
  bool window_cut;
};

// A progressive source must have sent every bit of every coefficient (coef_bits all 0; -1 is
// "never sent", > 0 the Al still missing). Otherwise libjpeg decodes it with block smoothing,
// which a complete transcoded copy would not get: level 10 would not be the source's pixels.
// Sets err's code and message when the source is incomplete.
bool ProgressionComplete(j_decompress_ptr src_info, JpegErrorManager* err) {
  if (!src_info->progressive_mode || src_info->coef_bits == nullptr) return true;
  for (int ci = 0; ci < src_info->num_components; ci++) {
    for (int k = 0; k < DCTSIZE2; k++) {
      const int bits = src_info->coef_bits[ci][k];
      if (bits == 0) continue;
      err->msg_code = kIncompleteMessageCode;
      std::snprintf(err->message, sizeof(err->message),
                    "progressive JPEG without all its scans: component %d, coefficient %d %s", ci,
                    k, bits < 0 ? "never sent" : "lacks its last bits");
      return false;
    }
  }
  return true;
}

// Cuts the centred window from the coefficients src_info holds (codec/centred_window.h) into
// job->window_dest, under an error manager of its own: a failure (out of memory) only leaves
// job->window_cut false.
void CutWindow(TranscodeJob* job, jvirt_barray_ptr* coefficients) {
  j_decompress_ptr src_info = &job->src_info;
  j_compress_ptr window_info = &job->window_info;
  jpeg_error_mgr* const transcode_err = src_info->err;
  std::memset(window_info, 0, sizeof(*window_info));
  // Accesses to src_info's arrays during the cut report to the cut's manager too.
  src_info->err = InitJpegErrorManager(&job->window_err, /*warnings_fatal=*/true);
  window_info->err = src_info->err;
  if (setjmp(job->window_err.jump)) {
    jpeg_destroy_compress(window_info);
    src_info->err = transcode_err;
    job->window_cut = false;
    return;
  }
  job->window_cut =
      WriteCentredWindow(src_info, coefficients, src_info->image_height, job->window_side,
                         job->max_memory, window_info, &job->window_dest, 1 << 20);
  jpeg_destroy_compress(window_info);
  src_info->err = transcode_err;
}

// All libjpeg calls of a transcode. Returns false with job->err.msg_code/message set on failure.
bool RunTranscode(TranscodeJob* job) {
  j_decompress_ptr src_info = &job->src_info;
  j_compress_ptr dst_info = &job->dst_info;
  // Zeroed structs make jpeg_destroy_* safe whichever step failed.
  std::memset(src_info, 0, sizeof(*src_info));
  std::memset(dst_info, 0, sizeof(*dst_info));
  src_info->err = InitJpegErrorManager(&job->err, /*warnings_fatal=*/true);
  dst_info->err = &job->err.pub;
  if (setjmp(job->err.jump)) {
    jpeg_destroy_compress(dst_info);
    jpeg_destroy_decompress(src_info);
    return false;
  }

  jpeg_create_decompress(src_info);
  src_info->mem->max_memory_to_use = job->max_memory;
  InitScanCapProgress(&job->progress, job->max_input_scans);
  src_info->progress = &job->progress.pub;
  if (!job->strip_metadata) {
    SaveAllMarkers(src_info);
  }
  jpeg_mem_src(src_info, job->src, static_cast<unsigned long>(job->src_size));
  jpeg_read_header(src_info, TRUE);
  // Sampling factors that are not integer multiples of each other (say 3x2 luma with 2x1
  // chroma) transcode fine, but libjpeg cannot decode them ("Fractional sampling not
  // implemented yet"), so nothing could check that the result decodes to the source's pixels,
  // and no reader could show either: keep such a file byte for byte. Found by the fuzzer.
  for (int ci = 0; ci < src_info->num_components; ci++) {
    const jpeg_component_info& c = src_info->comp_info[ci];
    if (c.h_samp_factor <= 0 || c.v_samp_factor <= 0 ||
        src_info->max_h_samp_factor % c.h_samp_factor != 0 ||
        src_info->max_v_samp_factor % c.v_samp_factor != 0) {
      ERREXIT(src_info, JERR_FRACT_SAMPLE_NOTIMPL);
    }
  }
  // Reads every scan (this is where the scan cap and the memory cap bite).
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(src_info);
  if (!ProgressionComplete(src_info, &job->err)) {
    jpeg_destroy_decompress(src_info);
    return false;
  }

  jpeg_create_compress(dst_info);
  dst_info->mem->max_memory_to_use = job->max_memory;
  jpeg_copy_critical_parameters(src_info, dst_info);

  ComponentSampling sampling[MAX_COMPONENTS];
  for (int ci = 0; ci < dst_info->num_components && ci < MAX_COMPONENTS; ci++) {
    sampling[ci].h = dst_info->comp_info[ci].h_samp_factor;
    sampling[ci].v = dst_info->comp_info[ci].v_samp_factor;
  }
  if (!BuildScanScript(dst_info->jpeg_color_space, dst_info->num_components, sampling,
                       &job->script)) {
    ERREXIT2(dst_info, JERR_COMPONENT_COUNT, dst_info->num_components, MAX_COMPONENTS);
  }
  dst_info->scan_info = job->script.scans.data();
  dst_info->num_scans = job->script.num_scans;
  // Huffman only, optimized tables, no restart markers, whatever the source used.
  dst_info->arith_code = FALSE;
  dst_info->optimize_coding = TRUE;
  dst_info->restart_interval = 0;
  dst_info->restart_in_rows = 0;

  // Progressive output is usually a little smaller than the source.
  InstallMallocDestination(dst_info, &job->dest, job->src_size + job->src_size / 8 + 4096);
  jpeg_write_coefficients(dst_info, coefficients);
  CopySavedMarkers(src_info, dst_info);
  jpeg_finish_compress(dst_info);
  if (job->window_side > 0) CutWindow(job, coefficients);
  // The coefficients belong to the decompressor, so it finishes last.
  jpeg_finish_decompress(src_info);
  job->trailing_bytes = src_info->src->bytes_in_buffer;

  jpeg_destroy_compress(dst_info);
  jpeg_destroy_decompress(src_info);
  return true;
}

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};

TranscodeResult Passthrough(PassthroughReason reason, std::string detail) {
  TranscodeResult result;
  result.reason = reason;
  result.detail = std::move(detail);
  return result;
}

}  // namespace

bool LooksLikeJpeg(std::span<const uint8_t> data) {
  return data.size() >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

TranscodeResult Transcode(std::span<const uint8_t> jpeg, const TranscodeOptions& options) {
  if (jpeg.empty()) return Passthrough(PassthroughReason::kEmpty, "empty file");
  if (!LooksLikeJpeg(jpeg)) {
    return Passthrough(PassthroughReason::kNotJpeg, "does not start with FF D8 FF");
  }
  if (jpeg.size() > ULONG_MAX) return Passthrough(PassthroughReason::kTooLarge, "file too large");

  auto job = std::make_unique<TranscodeJob>();
  job->src = jpeg.data();
  job->src_size = jpeg.size();
  job->strip_metadata = options.strip_metadata;
  job->max_input_scans = options.max_input_scans;
  job->max_memory = options.max_memory_bytes > static_cast<uint64_t>(LONG_MAX)
                        ? LONG_MAX
                        : static_cast<long>(options.max_memory_bytes);
  job->window_side = options.window_side > 0 ? std::max(options.window_side, kMinWindowSide) : 0;
  bool ok = RunTranscode(job.get());
  std::unique_ptr<unsigned char, FreeDeleter> buffer(job->dest.buffer);
  std::unique_ptr<unsigned char, FreeDeleter> window(job->window_dest.buffer);
  if (!ok) return Passthrough(ReasonForJpegMessage(job->err.msg_code), job->err.message);
  if (job->trailing_bytes != 0) {
    return Passthrough(PassthroughReason::kTrailingData,
                       std::to_string(job->trailing_bytes) + " bytes after EOI");
  }

  std::span<const uint8_t> output(buffer.get(), job->dest.size);
  std::span<const uint8_t> groups(job->script.group.data(),
                                  static_cast<size_t>(job->script.num_scans));
  auto split = SplitIntoGroups(output, groups);
  if (!split) {
    // Our own output does not parse: a bug, but the source is still safe to store as it is.
    return Passthrough(PassthroughReason::kCorrupt, split.error().ToString());
  }
  TranscodeResult result;
  result.image = std::move(*split);
  if (job->window_cut) result.window.assign(window.get(), window.get() + job->window_dest.size);
  return result;
}

}  // namespace pcrfs::codec
