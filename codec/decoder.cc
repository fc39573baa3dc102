#include "codec/decoder.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "codec/jpeg_error.h"
#include "codec/libjpeg.h"

namespace pcrfs::codec {
namespace {

// Decoding a hostile file must not take the process's memory.
constexpr long kMaxDecoderMemory = 1L << 30;
constexpr uint64_t kMaxPixelBytes = uint64_t{1} << 31;

// Plain C data only (see jpeg_error.h).
struct DecodeJob {
  const uint8_t* src;
  size_t src_size;
  JpegErrorManager err;
  jpeg_decompress_struct info;
};

// Reads the header and starts decompression. The caller destroys job->info in every case.
bool StartDecode(DecodeJob* job) {
  j_decompress_ptr info = &job->info;
  info->err = InitJpegErrorManager(&job->err, /*warnings_fatal=*/true);
  if (setjmp(job->err.jump)) return false;
  jpeg_create_decompress(info);
  info->mem->max_memory_to_use = kMaxDecoderMemory;
  jpeg_mem_src(info, job->src, static_cast<unsigned long>(job->src_size));
  jpeg_read_header(info, TRUE);
  jpeg_start_decompress(info);
  return true;
}

// Reads every scanline into `pixels` and finishes. The caller destroys job->info.
bool ReadPixels(DecodeJob* job, uint8_t* pixels, size_t row_bytes) {
  j_decompress_ptr info = &job->info;
  if (setjmp(job->err.jump)) return false;
  while (info->output_scanline < info->output_height) {
    JSAMPROW row = pixels + row_bytes * info->output_scanline;
    jpeg_read_scanlines(info, &row, 1);
  }
  jpeg_finish_decompress(info);
  return true;
}

struct DestroyDecompress {
  void operator()(DecodeJob* job) const {
    jpeg_destroy_decompress(&job->info);
    delete job;
  }
};

Status DecodeError(const DecodeJob& job) {
  return Status::Corruption(std::string("jpeg decode: ") + job.err.message);
}

}  // namespace

Result<DecodedImage> DecodeJpeg(std::span<const uint8_t> jpeg) {
  // Value-initialized, so jpeg_destroy_decompress is safe whatever step failed.
  std::unique_ptr<DecodeJob, DestroyDecompress> job(new DecodeJob{});
  job->src = jpeg.data();
  job->src_size = jpeg.size();
  if (jpeg.empty()) return Err(Status::Corruption("jpeg decode: empty input"));
  if (!StartDecode(job.get())) return Err(DecodeError(*job));

  const jpeg_decompress_struct& info = job->info;
  uint64_t row_bytes = uint64_t{info.output_width} * static_cast<uint64_t>(info.output_components);
  uint64_t total = row_bytes * info.output_height;
  if (total > kMaxPixelBytes) {
    return Err(Status::ResourceExhausted(
        "jpeg decode: image too large: " + std::to_string(info.output_width) + "x" +
        std::to_string(info.output_height)));
  }
  DecodedImage image;
  image.width = static_cast<int>(info.output_width);
  image.height = static_cast<int>(info.output_height);
  image.components = info.output_components;
  image.pixels.resize(total);
  if (!ReadPixels(job.get(), image.pixels.data(), row_bytes)) return Err(DecodeError(*job));
  return image;
}

}  // namespace pcrfs::codec
