// pcr ladder STORE PATH -o OUT.png [--columns C] [--width W]: a contact sheet of one image at
// levels 1..10, each panel captioned with its bytes, % of level 10, PSNR and MS-SSIM against
// level 10. Layout (docs/quality.md): with panels of PW x PH, cells CW = max(PW, 96) wide (room
// for a caption), font scale s (2 when PW >= 190, else 1), line = 9s, title = line + 8 and
// caption = 4 lines + 4:
//   width  = 8 + C * (CW + 8)
//   height = 8 + title + R * (PH + caption + 8),  R = ceil(10 / C)
// and panel i (level i+1) at x = 8 + (i % C) * (CW + 8), y = 8 + title + (i / C) * (PH +
// caption + 8).
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>

#include "codec/decoder.h"
#include "codec/quality.h"
#include "codec/transcoder.h"
#include "index/store.h"
#include "mount-tools/bitmap_font.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"
#include "mount-tools/raster.h"

namespace pcrfs::tools {
namespace po = boost::program_options;
namespace {

constexpr int kGap = 8;
constexpr int kCaptionLines = 4;
constexpr int kMinCellWidth = 96;  // 16 characters at scale 1
constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kInk{20, 20, 20};
constexpr Rgb kFaint{90, 90, 90};

RgbImage ToRgbImage(const codec::DecodedImage& decoded) {
  codec::DecodedImage rgb = codec::ToRgb(decoded);
  RgbImage out;
  out.width = rgb.width;
  out.height = rgb.height;
  out.pixels = std::move(rgb.pixels);
  return out;
}

struct Panel {
  int level = 0;
  uint64_t bytes = 0;
  double psnr = 0;
  double msssim = 0;
  RgbImage image;
};

// The w x h region of src whose top-left corner is (x, y). REQUIRES: it lies inside src.
RgbImage Crop(const RgbImage& src, int x, int y, int w, int h) {
  RgbImage out(w, h, kBackground);
  for (int row = 0; row < h; ++row) {
    std::copy(src.at(x, y + row), src.at(x, y + row) + 3 * w, out.at(0, row));
  }
  return out;
}

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::vector<std::string> Caption(const Panel& p, uint64_t full_bytes) {
  const double percent = full_bytes ? 100.0 * static_cast<double>(p.bytes) / full_bytes : 0;
  std::string pct = p.bytes == full_bytes ? "100%" : Format("%.1f%%", percent);
  std::string level = "level " + std::to_string(p.level) + (p.level == 10 ? " (full)" : "");
  std::string psnr = std::isinf(p.psnr) ? "lossless" : "PSNR " + Format("%.2f", p.psnr) + " dB";
  return {level, HumanBytes(p.bytes) + " " + pct, psnr, "MS-SSIM " + Format("%.4f", p.msssim)};
}

// Every level of `entry` decoded; level 10 last. Errors name the level.
Result<std::vector<codec::DecodedImage>> DecodeLevels(const index::Store& store,
                                                      const index::Entry& entry) {
  std::vector<codec::DecodedImage> decoded;
  for (int k = 1; k <= codec::kNumGroups; ++k) {
    std::vector<uint8_t> bytes;
    if (Status s = store.ReadFile(entry, k, &bytes); !s.ok()) {
      return Err(Status::IOError("level " + std::to_string(k) + ": " + s.message()));
    }
    auto image = codec::DecodeJpeg(bytes);
    if (!image) {
      return Err(Status::IOError("level " + std::to_string(k) + ": " + image.error().message()));
    }
    decoded.push_back(std::move(*image));
  }
  return decoded;
}

// One panel per level, pw x ph pixels: shrunk, or the centre at 1:1 with `crop`; captioned
// with its size and fidelity against level 10.
std::vector<Panel> MakePanels(const std::vector<codec::DecodedImage>& decoded,
                              const index::Entry& entry, int pw, int ph, bool crop) {
  const codec::DecodedImage& ref = decoded.back();
  auto ms_ref = codec::MsSsimReference::Make(ref);  // an error for images below 11x11
  std::vector<Panel> panels;
  for (int k = 1; k <= codec::kNumGroups; ++k) {
    Panel p;
    p.level = k;
    p.bytes = entry.SizeAtLevel(k);
    p.psnr = codec::Psnr(decoded[k - 1], ref);
    p.msssim = std::nan("");  // NaN (printed "nan") for images below 11x11
    if (ms_ref) {
      auto ms = ms_ref->Compare(decoded[k - 1]);
      if (ms) p.msssim = *ms;
    }
    RgbImage rgb = ToRgbImage(decoded[k - 1]);
    if (crop) {
      p.image = Crop(rgb, (rgb.width - pw) / 2, (rgb.height - ph) / 2, pw, ph);
    } else {
      p.image = pw == rgb.width ? std::move(rgb) : AreaDownscale(rgb, pw, ph);
    }
    panels.push_back(std::move(p));
  }
  return panels;
}

// The contact sheet: a title line, then the panels in rows of `columns`, captions below each.
RgbImage DrawSheet(const std::vector<Panel>& panels, const std::string& title, int columns, int pw,
                   int ph, uint64_t full_bytes) {
  const int scale = pw >= 190 ? 2 : 1;  // 190 px: 16 characters at scale 2
  const int line = kLineHeight * scale;
  const int title_h = line + kGap;
  const int caption_h = kCaptionLines * line + 4;
  const int rows = (codec::kNumGroups + columns - 1) / columns;
  const int cell_w = std::max(pw, kMinCellWidth);
  const int sheet_w = kGap + columns * (cell_w + kGap);
  const int sheet_h = kGap + title_h + rows * (ph + caption_h + kGap);
  RgbImage sheet(sheet_w, sheet_h, kBackground);
  DrawText(&sheet, kGap, kGap, title, scale, kInk, sheet_w - kGap);
  for (int i = 0; i < codec::kNumGroups; ++i) {
    const int x = kGap + (i % columns) * (cell_w + kGap);
    const int y = kGap + title_h + (i / columns) * (ph + caption_h + kGap);
    Blit(panels[i].image, &sheet, x, y);
    std::vector<std::string> caption = Caption(panels[i], full_bytes);
    for (size_t l = 0; l < caption.size(); ++l) {
      DrawText(&sheet, x, y + ph + 4 + static_cast<int>(l) * line, caption[l], scale,
               l == 0 ? kInk : kFaint, x + cell_w);
    }
  }
  return sheet;
}

}  // namespace

int RunLadder(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr ladder STORE PATH -o OUT.png [--columns C] [--width W] [--crop]\n\n"
      "Draws the JPEG PATH of the store at levels 1..10 side by side, each panel captioned\n"
      "with its size, % of level 10, and PSNR and MS-SSIM against level 10.\n\noptions");
  std::string output;
  int columns = 5, width = 256;
  opts.add_options()("help,h", "show this help")("output,o", po::value<std::string>(&output),
                                                 "the PNG to write (required)")(
      "columns", po::value<int>(&columns)->default_value(5), "panels per row (1..10)")(
      "width", po::value<int>(&width)->default_value(256),
      "panel width in pixels (96..4096); images are only shrunk, never enlarged")(
      "crop",
      "show the centre of the image at 1:1 (W x 3W/4 pixels) instead of all of it "
      "shrunk: the differences between levels are visible");
  std::string store_dir, path;
  po::variables_map vm;
  if (auto exit =
          ParseCommandLine("ladder", args, opts, {{"store", &store_dir}, {"path", &path}},
                           "0 done, 1 read, decode or write failed, 2 bad arguments", &vm)) {
    return *exit;
  }
  if (store_dir.empty() || path.empty() || output.empty()) {
    std::fprintf(stderr, "pcr ladder: STORE, PATH and -o OUT.png are required (see --help)\n");
    return 2;
  }
  if (columns < 1 || columns > 10) {
    std::fprintf(stderr, "pcr ladder: --columns must be between 1 and 10\n");
    return 2;
  }
  if (width < 96 || width > 4096) {
    std::fprintf(stderr, "pcr ladder: --width must be between 96 and 4096\n");
    return 2;
  }
  auto file = OpenStoreFile("ladder", store_dir, path);
  if (!file) return file.error();
  const index::Store& store = *file->store;
  const index::Entry* entry = &file->entry;
  if (entry->kind != index::EntryKind::kJpeg) {
    std::fprintf(stderr,
                 "pcr ladder: %s: stored byte for byte (%s), so every level is the same file\n",
                 path.c_str(), index::PassthroughReasonName(entry->passthrough_reason).c_str());
    return 2;
  }

  auto decoded = DecodeLevels(store, *entry);
  if (!decoded) {
    std::fprintf(stderr, "pcr ladder: %s: %s\n", path.c_str(), decoded.error().message().c_str());
    return 1;
  }
  const codec::DecodedImage& ref = decoded->back();
  const bool crop = vm.count("crop") > 0;
  const int pw = std::min(width, ref.width);
  const int ph = crop ? std::min(ref.height, std::max(1, pw * 3 / 4))
                      : std::max(1, static_cast<int>(std::lround(static_cast<double>(ref.height) *
                                                                 pw / ref.width)));
  const std::vector<Panel> panels = MakePanels(*decoded, *entry, pw, ph, crop);
  const std::string title = path + "  " + std::to_string(ref.width) + "x" +
                            std::to_string(ref.height) + (crop ? "  centre 1:1" : "");
  const RgbImage sheet = DrawSheet(panels, title, columns, pw, ph, entry->SizeAtLevel(10));
  const int rows = (codec::kNumGroups + columns - 1) / columns;
  if (Status s = WritePng(output, sheet); !s.ok()) {
    std::fprintf(stderr, "pcr ladder: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("%s: %dx%d px, 10 panels of %dx%d in %d rows x %d columns\n", output.c_str(),
              sheet.width, sheet.height, pw, ph, rows, columns);
  return 0;
}

}  // namespace pcrfs::tools
