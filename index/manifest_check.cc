#include "index/manifest_check.h"

#include <cmath>
#include <limits>

namespace pcrfs::index {
namespace {

std::string U(uint64_t v) { return std::to_string(v); }

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

class Checker {
 public:
  Checker(const std::string& path, const Manifest& m, const IndexReader& idx)
      : path_(path), m_(m), idx_(idx) {}

  Status Run() {
    PCRFS_RETURN_IF_ERROR(CheckOptions());
    PCRFS_RETURN_IF_ERROR(CheckCounts());
    PCRFS_RETURN_IF_ERROR(CheckRecords());
    PCRFS_RETURN_IF_ERROR(CheckBytes());
    return CheckQuality();
  }

 private:
  Status Bad(const std::string& field, const std::string& why) const {
    return Status::Corruption(path_ + ": \"" + field + "\" " + why +
                              " (the manifest was edited or damaged; rebuild the store or "
                              "restore manifest.json)");
  }

  Status CheckOptions() const {
    const uint32_t per = m_.options.images_per_record;
    if (per < 1 || per > kMaxImagesPerRecord) {
      return Bad("options.images_per_record",
                 "is " + U(per) + ", not in 1.." + U(kMaxImagesPerRecord));
    }
    if (m_.options.max_input_scans < 1 ||
        m_.options.max_input_scans > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
      return Bad("options.max_input_scans", "is " + U(m_.options.max_input_scans) + ", not in 1.." +
                                                U(std::numeric_limits<int>::max()));
    }
    return Status::OK();
  }

  Status CheckCounts() const {
    if (m_.num_entries != idx_.NumEntries()) {
      return Bad("num_entries",
                 "is " + U(m_.num_entries) + ", the index holds " + U(idx_.NumEntries()));
    }
    if (m_.num_directories < 1) return Bad("num_directories", "is 0 (the root is a directory)");
    const uint64_t sum =
        SaturatingAdd(SaturatingAdd(m_.num_directories, m_.num_jpeg), m_.num_passthrough);
    if (sum != m_.num_entries) {
      return Bad("num_directories\" + \"num_jpeg\" + \"num_passthrough",
                 "is " + U(sum) + ", not num_entries " + U(m_.num_entries));
    }
    uint64_t by_reason = 0;
    for (const auto& [name, count] : m_.passthrough_by_reason) {
      by_reason = SaturatingAdd(by_reason, count);
    }
    if (by_reason != m_.num_passthrough) {
      return Bad("passthrough_by_reason",
                 "adds up to " + U(by_reason) + ", not num_passthrough " + U(m_.num_passthrough));
    }
    return Status::OK();
  }

  // One lookup per record of the index (not per record the manifest claims).
  Status CheckRecords() {
    const uint64_t records = idx_.NumRecords();
    if (m_.num_records != records) {
      return Bad("num_records", "is " + U(m_.num_records) + ", the index has " + U(records));
    }
    if (auto meta = idx_.GetMeta("num_records"); meta && *meta != U(records)) {
      return Bad("num_records", "is " + U(m_.num_records) + ", the index's meta says " + *meta);
    }
    // Checked above: no overflow. (Records may hold more: a file unreadable at build time
    // keeps its slot but has no entry.)
    const uint64_t files = m_.num_jpeg + m_.num_passthrough;
    uint64_t slots = 0;
    for (uint32_t id = 0; id < records; ++id) {
      auto info = idx_.GetRecord(id);
      if (!info) return info.error();
      if (info->num_images > m_.options.images_per_record) {
        return Bad("options.images_per_record", "is " + U(m_.options.images_per_record) +
                                                    ", but record " + U(id) + " holds " +
                                                    U(info->num_images) + " files");
      }
      slots += info->num_images;
      record_bytes_ = SaturatingAdd(record_bytes_, info->file_size);
    }
    if (slots < files) {
      return Bad("num_jpeg\" + \"num_passthrough",
                 "is " + U(files) + ", but the records hold " + U(slots) + " files");
    }
    return Status::OK();
  }

  Status CheckBytes() const {
    if (m_.source_jpeg_bytes > m_.source_bytes) {
      return Bad("source_jpeg_bytes", "is " + U(m_.source_jpeg_bytes) +
                                          ", more than source_bytes " + U(m_.source_bytes));
    }
    // Every level of a file is a prefix of the next, plus the 2-byte EOI of a JPEG; all of
    // level 10 but those two bytes is stored in the records.
    const uint64_t most = SaturatingAdd(record_bytes_, 2 * m_.num_jpeg);
    for (int k = 1; k <= kNumGroups; ++k) {
      const auto i = static_cast<size_t>(k - 1);
      const std::string at = "[" + std::to_string(i) + "]";
      if (m_.jpeg_level_bytes[i] > m_.level_bytes[i]) {
        return Bad("jpeg_level_bytes" + at, "is " + U(m_.jpeg_level_bytes[i]) +
                                                ", more than level_bytes" + at + " " +
                                                U(m_.level_bytes[i]));
      }
      for (const auto* bytes : {&m_.level_bytes, &m_.jpeg_level_bytes}) {
        if (k > 1 && (*bytes)[i] < (*bytes)[i - 1]) {
          return Bad(
              (bytes == &m_.level_bytes ? "level_bytes" : "jpeg_level_bytes") + at,
              "is " + U((*bytes)[i]) + ", less than the level below (" + U((*bytes)[i - 1]) + ")");
        }
      }
      if (m_.level_bytes[i] > most) {
        return Bad("level_bytes" + at, "is " + U(m_.level_bytes[i]) +
                                           ", more than the record files hold (" + U(most) + ")");
      }
    }
    return Status::OK();
  }

  Status CheckQuality() const {
    const QualitySample& q = m_.quality;
    if (q.measured > m_.num_jpeg) {
      return Bad("quality.measured",
                 "is " + U(q.measured) + ", more than num_jpeg " + U(m_.num_jpeg));
    }
    for (int k = 1; k <= kNumGroups; ++k) {
      const LevelQuality& l = q.levels[static_cast<size_t>(k - 1)];
      const std::string at = "quality.levels[" + std::to_string(k - 1) + "].";
      if (l.n > q.measured) {
        return Bad(at + "n", "is " + U(l.n) + ", more than quality.measured " + U(q.measured));
      }
      for (double v : {l.mean_msssim, l.p5_msssim, l.min_msssim}) {
        if (!(v >= -1 && v <= 1)) return Bad(at + "msssim", "holds a value outside -1..1");
      }
      for (double v : {l.mean_psnr, l.p5_psnr, l.min_psnr}) {
        if (!(v >= 0)) return Bad(at + "psnr", "holds a negative value");
      }
    }
    return Status::OK();
  }

  const std::string& path_;
  const Manifest& m_;
  const IndexReader& idx_;
  uint64_t record_bytes_ = 0;  // the record files' sizes per the index
};

}  // namespace

Status CheckManifest(const std::string& manifest_path, const Manifest& m, const IndexReader& idx) {
  return Checker(manifest_path, m, idx).Run();
}

}  // namespace pcrfs::index
