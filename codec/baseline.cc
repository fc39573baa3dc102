// The call order follows jpegtran.c (-copy all -optimize): error manager, create, save markers,
// read header, read coefficients, copy critical parameters, write coefficients, copy markers,
// finish, destroy. See codec/transcoder.cc for the same with a progressive scan script.

#include "codec/baseline.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "codec/jpeg_dest.h"
#include "codec/jpeg_error.h"
#include "codec/libjpeg.h"
#include "codec/markers.h"

namespace pcrfs::codec {
namespace {

constexpr long kMaxMemory = 1L << 30;
constexpr int kMaxScans = 1000;

// Plain C data only (see jpeg_error.h): a longjmp out of libjpeg skips no destructor.
struct BaselineJob {
  const uint8_t* src;
  size_t src_size;
  JpegErrorManager err;
  ScanCapProgress progress;
  jpeg_decompress_struct src_info;
  jpeg_compress_struct dst_info;
  MallocDestination dest;  // dest.buffer is the caller's to free, also after a failure
};

// Opens job->src_info and reads every coefficient. The caller destroys src_info in every case.
jvirt_barray_ptr* ReadAll(j_decompress_ptr src_info, BaselineJob* job, bool save_markers) {
  jpeg_create_decompress(src_info);
  src_info->mem->max_memory_to_use = kMaxMemory;
  InitScanCapProgress(&job->progress, kMaxScans);
  src_info->progress = &job->progress.pub;
  if (save_markers) SaveAllMarkers(src_info);
  jpeg_mem_src(src_info, job->src, static_cast<unsigned long>(job->src_size));
  jpeg_read_header(src_info, TRUE);
  return jpeg_read_coefficients(src_info);
}

bool RunToBaseline(BaselineJob* job) {
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
  jvirt_barray_ptr* coefficients = ReadAll(src_info, job, /*save_markers=*/true);

  jpeg_create_compress(dst_info);
  dst_info->mem->max_memory_to_use = kMaxMemory;
  // Also jpeg_set_defaults: sequential (no scan script), one interleaved scan per 4 components.
  jpeg_copy_critical_parameters(src_info, dst_info);
  dst_info->arith_code = FALSE;
  dst_info->optimize_coding = TRUE;
  dst_info->restart_interval = 0;
  dst_info->restart_in_rows = 0;
  // A sequential file is usually a little larger than the progressive one.
  InstallMallocDestination(dst_info, &job->dest, job->src_size + job->src_size / 2 + 4096);
  jpeg_write_coefficients(dst_info, coefficients);
  CopySavedMarkers(src_info, dst_info);
  jpeg_finish_compress(dst_info);
  // The coefficients belong to the decompressor, so it finishes last.
  jpeg_finish_decompress(src_info);
  jpeg_destroy_compress(dst_info);
  jpeg_destroy_decompress(src_info);
  return true;
}

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};

Status JobError(const JpegErrorManager& err, const char* what) {
  std::string message = std::string(what) + ": " + err.message;
  if (err.msg_code == kScanCapMessageCode || err.msg_code == JERR_OUT_OF_MEMORY) {
    return Status::ResourceExhausted(std::move(message));
  }
  return Status::Corruption(std::move(message));
}

// ReadCoefficients' state: plain C data only.
struct CoefficientJob {
  BaselineJob read;
  jvirt_barray_ptr* arrays;
};

// Reads the header and every coefficient. The caller destroys job->read.src_info.
bool StartCoefficients(CoefficientJob* job) {
  j_decompress_ptr info = &job->read.src_info;
  info->err = InitJpegErrorManager(&job->read.err, /*warnings_fatal=*/true);
  if (setjmp(job->read.err.jump)) return false;
  job->arrays = ReadAll(info, &job->read, /*save_markers=*/false);
  return true;
}

// Copies component ci's blocks into out (64 per block, row order; sized by the caller).
bool CopyBlocks(CoefficientJob* job, int ci, int16_t* out) {
  j_decompress_ptr info = &job->read.src_info;
  if (setjmp(job->read.err.jump)) return false;
  const jpeg_component_info& c = info->comp_info[ci];
  for (JDIMENSION row = 0; row < c.height_in_blocks; row++) {
    JBLOCKARRAY rows = (*info->mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(info),
                                                        job->arrays[ci], row, 1, FALSE);
    for (JDIMENSION col = 0; col < c.width_in_blocks; col++) {
      std::memcpy(out + (size_t{row} * c.width_in_blocks + col) * DCTSIZE2, rows[0][col],
                  sizeof(JBLOCK));
    }
  }
  return true;
}

struct DestroyCoefficientJob {
  void operator()(CoefficientJob* job) const {
    jpeg_destroy_decompress(&job->read.src_info);
    delete job;
  }
};

}  // namespace

Result<std::vector<uint8_t>> ToBaseline(std::span<const uint8_t> progressive) {
  if (progressive.empty()) return Err(Status::Corruption("baseline: empty input"));
  if (progressive.size() > ULONG_MAX) {
    return Err(Status::ResourceExhausted("baseline: input too large"));
  }
  auto job = std::make_unique<BaselineJob>();
  job->src = progressive.data();
  job->src_size = progressive.size();
  const bool ok = RunToBaseline(job.get());
  std::unique_ptr<unsigned char, FreeDeleter> buffer(job->dest.buffer);
  if (!ok) return Err(JobError(job->err, "baseline"));
  return std::vector<uint8_t>(buffer.get(), buffer.get() + job->dest.size);
}

Result<JpegCoefficients> ReadCoefficients(std::span<const uint8_t> jpeg) {
  if (jpeg.empty()) return Err(Status::Corruption("coefficients: empty input"));
  // Value-initialized, so jpeg_destroy_decompress is safe whatever step failed.
  std::unique_ptr<CoefficientJob, DestroyCoefficientJob> job(new CoefficientJob{});
  job->read.src = jpeg.data();
  job->read.src_size = jpeg.size();
  if (!StartCoefficients(job.get())) return Err(JobError(job->read.err, "coefficients"));
  const jpeg_decompress_struct& info = job->read.src_info;
  JpegCoefficients out;
  out.width = info.image_width;
  out.height = info.image_height;
  out.color_space = info.jpeg_color_space;
  for (int ci = 0; ci < info.num_components; ci++) {
    const jpeg_component_info& c = info.comp_info[ci];
    JpegCoefficients::Component& comp = out.components.emplace_back();
    comp.component_id = c.component_id;
    comp.h_samp = c.h_samp_factor;
    comp.v_samp = c.v_samp_factor;
    comp.width_in_blocks = c.width_in_blocks;
    comp.height_in_blocks = c.height_in_blocks;
    const JQUANT_TBL* quant = c.quant_table;
    if (quant == nullptr && c.quant_tbl_no >= 0 && c.quant_tbl_no < NUM_QUANT_TBLS) {
      quant = info.quant_tbl_ptrs[c.quant_tbl_no];
    }
    if (quant != nullptr) comp.quant.assign(quant->quantval, quant->quantval + DCTSIZE2);
    comp.coef.resize(size_t{c.width_in_blocks} * c.height_in_blocks * DCTSIZE2);
    if (!CopyBlocks(job.get(), ci, comp.coef.data())) {
      return Err(JobError(job->read.err, "coefficients"));
    }
  }
  return out;
}

}  // namespace pcrfs::codec
