// Internal subcommands for the tests (docs/quality.md); not in pcr's usage text.
//   pcr quality-pair A.jpg B.jpg    prints "PSNR MS-SSIM" of B against A (B's pixels vs A's)
//   pcr quality-sample STORE [--sample N] [--seed S] [--threads T]
//                                   prints MeasureStoreQuality's table, one line per level
#include <boost/program_options.hpp>
#include <cinttypes>
#include <cstdio>
#include <iostream>

#include "builder/quality_sample.h"
#include "codec/decoder.h"
#include "codec/quality.h"
#include "common/file_util.h"
#include "index/store.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace po = boost::program_options;
namespace {

constexpr uint64_t kMaxInputBytes = uint64_t{256} << 20;

Result<codec::DecodedImage> DecodeFile(const std::string& path) {
  auto bytes = ReadWholeFile(path, kMaxInputBytes);
  if (!bytes) return Err(bytes.error());
  auto image = codec::DecodeJpeg(*bytes);
  if (!image) return Err(Status::Corruption(path + ": " + image.error().message()));
  return image;
}

}  // namespace

int RunQualityPair(const std::vector<std::string>& args) {
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: pcr quality-pair A.jpg B.jpg  (prints PSNR and MS-SSIM)\n");
    return 2;
  }
  auto a = DecodeFile(args[0]);
  if (!a) {
    std::fprintf(stderr, "pcr quality-pair: %s\n", a.error().message().c_str());
    return 1;
  }
  auto b = DecodeFile(args[1]);
  if (!b) {
    std::fprintf(stderr, "pcr quality-pair: %s\n", b.error().message().c_str());
    return 1;
  }
  auto ms = codec::MsSsim(*a, *b);
  if (!ms) {
    std::fprintf(stderr, "pcr quality-pair: %s\n", ms.error().message().c_str());
    return 1;
  }
  std::printf("%.17g %.17g\n", codec::Psnr(*a, *b), *ms);
  return 0;
}

int RunQualitySample(const std::vector<std::string>& args) {
  po::options_description opts("usage: pcr quality-sample STORE [--sample N] [--seed S]");
  uint32_t sample = 100, threads = 0;
  uint64_t seed = 1;
  std::string store_dir;
  opts.add_options()("sample", po::value<uint32_t>(&sample)->default_value(100))(
      "seed", po::value<uint64_t>(&seed)->default_value(1))(
      "threads", po::value<uint32_t>(&threads)->default_value(0))(
      "store", po::value<std::string>(&store_dir));
  po::positional_options_description pos;
  pos.add("store", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "pcr quality-sample: %s\n", e.what());
    return 2;
  }
  if (store_dir.empty()) {
    std::fprintf(stderr, "%s\n", "usage: pcr quality-sample STORE [--sample N] [--seed S]");
    return 2;
  }
  auto store = index::Store::Open(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr quality-sample: %s\n", store.error().message().c_str());
    return 2;
  }
  uint32_t skipped = 0;
  auto q = MeasureStoreQuality(**store, sample, seed, threads, &skipped);
  if (!q) {
    std::fprintf(stderr, "pcr quality-sample: %s\n", q.error().message().c_str());
    return 1;
  }
  std::printf("level n mean_psnr p5_psnr min_psnr mean_msssim p5_msssim min_msssim skipped=%" PRIu32
              "\n",
              skipped);
  for (int k = 1; k <= codec::kNumGroups; ++k) {
    const LevelQuality& l = (*q)[k - 1];
    std::printf("%d %" PRIu32 " %.17g %.17g %.17g %.17g %.17g %.17g\n", k, l.n, l.mean_psnr,
                l.p5_psnr, l.min_psnr, l.mean_msssim, l.p5_msssim, l.min_msssim);
  }
  return 0;
}

}  // namespace pcrfs::tools
