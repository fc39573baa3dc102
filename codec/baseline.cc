// The call order follows jpegtran.c (-copy all -optimize): error manager, create, save markers,
// read header, read coefficients, copy critical parameters, write coefficients, copy markers,
// finish, destroy. See codec/transcoder.cc for the same with a progressive scan script.

#include "codec/baseline.h"

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "codec/jpeg_dest.h"
#include "codec/jpeg_error.h"
#include "codec/libjpeg.h"
#include "codec/markers.h"

// libjpeg's own (jchuff.h: not in jpeglib.h, exported by libjpeg-turbo's shared library): the
// optimal table for symbol counts freq[0..256], as its optimize_coding pass makes it.
extern "C" void jpeg_gen_optimal_table(j_compress_ptr cinfo, JHUFF_TBL* htbl, long freq[]);

namespace pcrfs::codec {
namespace {

constexpr long kMaxMemory = 1L << 30;
constexpr int kMaxScans = 1000;

// The Huffman statistics of the sequential scan jpeg_write_coefficients writes, gathered here
// instead of by libjpeg's optimize_coding pass (a scalar test of all 64 coefficients of every
// block: 0.3 ms of a 0.5 ms level-1 re-encode, 0.75 of 2.4 ms at level 10): a block's nonzero
// coefficients as a 64-bit mask in zigzag order, walked with ctz, so zero runs cost nothing.
// The counts, hence the tables and the file, are exactly libjpeg's (codec_test compares the
// bytes with libjpeg's own pass, BaselineVarietyTest.*).

// kNaturalOrder[k]: the position in a block (row-major) of zigzag coefficient k.
constexpr std::array<int, 64> kNaturalOrder = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// kZigzagBits[j][b]: the zigzag-order bits of the coefficients at natural positions 8j..8j+7
// whose bits are set in b.
struct ZigzagBits {
  std::array<std::array<uint64_t, 256>, 8> t{};
  constexpr ZigzagBits() {
    std::array<int, 64> zigzag_of{};
    for (int k = 0; k < 64; k++) zigzag_of[static_cast<size_t>(kNaturalOrder[k])] = k;
    for (size_t j = 0; j < 8; j++) {
      for (size_t b = 0; b < 256; b++) {
        uint64_t m = 0;
        for (size_t i = 0; i < 8; i++) {
          if (b & (size_t{1} << i)) m |= uint64_t{1} << zigzag_of[8 * j + i];
        }
        t[j][b] = m;
      }
    }
  }
};
constexpr ZigzagBits kZigzagBits;

// The nonzero coefficients of `block` as bits in zigzag order.
uint64_t NonzeroZigzag(const JCOEF* block) {
  uint64_t natural = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (int q = 0; q < 4; q++) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * q));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * q + 8));
    const __m128i zeros = _mm_packs_epi16(_mm_cmpeq_epi16(a, zero), _mm_cmpeq_epi16(b, zero));
    natural |= uint64_t{static_cast<uint16_t>(~_mm_movemask_epi8(zeros))} << (16 * q);
  }
#else
  for (int i = 0; i < 64; i++) natural |= uint64_t{block[i] != 0} << i;
#endif
  uint64_t zz = 0;
  for (size_t j = 0; j < 8; j++) zz |= kZigzagBits.t[j][(natural >> (8 * j)) & 0xFF];
  return zz;
}

int BitLength(int v) { return v == 0 ? 0 : 32 - std::countl_zero(static_cast<uint32_t>(v)); }

// Counts one block's symbols as libjpeg's htest_one_block does; false for a coefficient out of
// the 8-bit range (then libjpeg's own pass reports it).
bool CountBlock(const JCOEF* block, int* last_dc, long* dc, long* ac) {
  const int diff = block[0] - *last_dc;
  *last_dc = block[0];
  const int dc_bits = BitLength(diff < 0 ? -diff : diff);
  if (dc_bits > 11) return false;
  dc[dc_bits]++;
  uint64_t mask = NonzeroZigzag(block) & ~uint64_t{1};
  int prev = 0;
  while (mask != 0) {
    const int k = std::countr_zero(mask);
    mask &= mask - 1;
    int run = k - prev - 1;
    for (; run > 15; run -= 16) ac[0xF0]++;
    const int v = block[kNaturalOrder[static_cast<size_t>(k)]];
    const int bits = BitLength(v < 0 ? -v : v);
    if (bits > 10) return false;
    ac[(run << 4) + bits]++;
    prev = k;
  }
  if (prev < 63) ac[0]++;  // EOB
  return true;
}

// Puts into dst_info the optimal Huffman tables of the one sequential scan that
// jpeg_write_coefficients(dst_info, coefficients) writes, walking the blocks in its order
// (jctrans.c: interleaved MCUs, with dummy blocks past the right and bottom edges: DC as the
// block before, no AC). False, with nothing changed, for what it does not handle (more than
// four components, or coefficients out of range): then libjpeg's optimize_coding pass does it.
// Runs under RunToBaseline's setjmp (access_virt_barray may longjmp): plain C data only.
bool SetOptimalTables(j_decompress_ptr src, j_compress_ptr dst, jvirt_barray_ptr* coefficients) {
  const int n = src->num_components;
  if (n < 1 || n > MAX_COMPS_IN_SCAN || dst->num_components != n) return false;
  long dc[NUM_HUFF_TBLS][257] = {}, ac[NUM_HUFF_TBLS][257] = {};
  int last_dc[MAX_COMPS_IN_SCAN] = {};
  int mcu_blocks = 0;
  for (int ci = 0; ci < n; ci++) {
    const jpeg_component_info& c = dst->comp_info[ci];
    if (c.dc_tbl_no < 0 || c.dc_tbl_no >= NUM_HUFF_TBLS || c.ac_tbl_no < 0 ||
        c.ac_tbl_no >= NUM_HUFF_TBLS) {
      return false;
    }
    mcu_blocks += src->comp_info[ci].h_samp_factor * src->comp_info[ci].v_samp_factor;
  }
  if (mcu_blocks > C_MAX_BLOCKS_IN_MCU) return false;
  auto access = [&](int ci, JDIMENSION row, JDIMENSION rows) {
    return (*src->mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(src), coefficients[ci],
                                           row, rows, FALSE);
  };
  if (n == 1) {  // not interleaved: every block in row order, no dummies
    const jpeg_component_info& c = src->comp_info[0];
    long* d = dc[dst->comp_info[0].dc_tbl_no];
    long* a = ac[dst->comp_info[0].ac_tbl_no];
    for (JDIMENSION row = 0; row < c.height_in_blocks; row++) {
      JBLOCKROW blocks = access(0, row, 1)[0];
      for (JDIMENSION col = 0; col < c.width_in_blocks; col++) {
        if (!CountBlock(blocks[col], &last_dc[0], d, a)) return false;
      }
    }
  } else {
    int max_h = 1, max_v = 1;
    for (int ci = 0; ci < n; ci++) {
      max_h = std::max(max_h, src->comp_info[ci].h_samp_factor);
      max_v = std::max(max_v, src->comp_info[ci].v_samp_factor);
    }
    const JDIMENSION mcus_per_row = (src->image_width + 8 * max_h - 1) / (8 * max_h);
    const JDIMENSION mcu_rows = (src->image_height + 8 * max_v - 1) / (8 * max_v);
    JBLOCKARRAY rows[MAX_COMPS_IN_SCAN];
    for (JDIMENSION mr = 0; mr < mcu_rows; mr++) {
      for (int ci = 0; ci < n; ci++) {
        const int v = src->comp_info[ci].v_samp_factor;
        rows[ci] = access(ci, mr * static_cast<JDIMENSION>(v), static_cast<JDIMENSION>(v));
      }
      for (JDIMENSION mc = 0; mc < mcus_per_row; mc++) {
        for (int ci = 0; ci < n; ci++) {
          const jpeg_component_info& c = src->comp_info[ci];
          const int h = c.h_samp_factor, v = c.v_samp_factor;
          const int last_col = static_cast<int>(c.width_in_blocks % static_cast<JDIMENSION>(h));
          const int last_row = static_cast<int>(c.height_in_blocks % static_cast<JDIMENSION>(v));
          const int blocks = mc + 1 < mcus_per_row || last_col == 0 ? h : last_col;
          const int real_rows = mr + 1 < mcu_rows || last_row == 0 ? v : last_row;
          long* d = dc[dst->comp_info[ci].dc_tbl_no];
          long* a = ac[dst->comp_info[ci].ac_tbl_no];
          for (int y = 0; y < v; y++) {
            int x = 0;
            if (y < real_rows) {
              JBLOCKROW row = rows[ci][y] + mc * static_cast<JDIMENSION>(h);
              for (; x < blocks; x++) {
                if (!CountBlock(row[x], &last_dc[ci], d, a)) return false;
              }
            }
            // Dummy blocks: a DC difference of 0, then EOB.
            d[0] += h - x;
            a[0] += h - x;
          }
        }
      }
    }
  }
  bool done_dc[NUM_HUFF_TBLS] = {}, done_ac[NUM_HUFF_TBLS] = {};
  for (int ci = 0; ci < n; ci++) {
    const int dt = dst->comp_info[ci].dc_tbl_no, at = dst->comp_info[ci].ac_tbl_no;
    if (!done_dc[dt]) {
      JHUFF_TBL*& t = dst->dc_huff_tbl_ptrs[dt];
      if (t == nullptr) t = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(dst));
      jpeg_gen_optimal_table(dst, t, dc[dt]);
      done_dc[dt] = true;
    }
    if (!done_ac[at]) {
      JHUFF_TBL*& t = dst->ac_huff_tbl_ptrs[at];
      if (t == nullptr) t = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(dst));
      jpeg_gen_optimal_table(dst, t, ac[at]);
      done_ac[at] = true;
    }
  }
  return true;
}

// Plain C data only (see jpeg_error.h): a longjmp out of libjpeg skips no destructor.
struct BaselineJob {
  const uint8_t* src;
  size_t src_size;
  bool libjpeg_statistics;
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
  dst_info->restart_interval = 0;
  dst_info->restart_in_rows = 0;
  // Optimal tables, from our statistics or from libjpeg's extra pass.
  dst_info->optimize_coding =
      job->libjpeg_statistics || !SetOptimalTables(src_info, dst_info, coefficients) ? TRUE : FALSE;
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

Result<std::vector<uint8_t>> ToBaseline(std::span<const uint8_t> progressive,
                                        bool libjpeg_statistics) {
  if (progressive.empty()) return Err(Status::Corruption("baseline: empty input"));
  if (progressive.size() > ULONG_MAX) {
    return Err(Status::ResourceExhausted("baseline: input too large"));
  }
  auto job = std::make_unique<BaselineJob>();
  job->src = progressive.data();
  job->src_size = progressive.size();
  job->libjpeg_statistics = libjpeg_statistics;
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
