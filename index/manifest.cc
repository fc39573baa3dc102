#include "index/manifest.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace pcrfs::index {
namespace {

using Json = nlohmann::ordered_json;

Status Bad(const std::string& what) { return Status::Corruption("manifest: " + what); }

// Reads an unsigned integer field that must be present and fit in T.
template <typename T>
Status GetUint(const Json& obj, const char* key, T* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(std::string("missing field \"") + key + "\"");
  if (!it->is_number_unsigned()) {
    return Bad(std::string("field \"") + key + "\" is not a non-negative integer");
  }
  uint64_t v = it->get<uint64_t>();
  if (v > std::numeric_limits<T>::max()) {
    return Bad(std::string("field \"") + key + "\" is out of range");
  }
  *out = static_cast<T>(v);
  return Status::OK();
}

Status GetBool(const Json& obj, const char* key, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(std::string("missing field \"") + key + "\"");
  if (!it->is_boolean()) return Bad(std::string("field \"") + key + "\" is not a boolean");
  *out = it->get<bool>();
  return Status::OK();
}

Status GetLevels(const Json& obj, const char* key, std::array<uint64_t, kNumGroups>* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(std::string("missing field \"") + key + "\"");
  if (!it->is_array() || it->size() != kNumGroups) {
    return Bad(std::string("field \"") + key + "\" is not an array of " +
               std::to_string(kNumGroups) + " integers");
  }
  for (size_t i = 0; i < kNumGroups; ++i) {
    const Json& v = (*it)[i];
    if (!v.is_number_unsigned()) {
      return Bad(std::string("field \"") + key + "\" holds a non-integer");
    }
    (*out)[i] = v.get<uint64_t>();
  }
  return Status::OK();
}

// A number, or null for +infinity (PSNR of identical images).
Status GetStat(const Json& obj, const char* key, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(std::string("quality: missing field \"") + key + "\"");
  if (it->is_null()) {
    *out = std::numeric_limits<double>::infinity();
    return Status::OK();
  }
  if (!it->is_number()) return Bad(std::string("quality: \"") + key + "\" is not a number");
  *out = it->get<double>();
  return Status::OK();
}

Status ParseQuality(const Json& q, QualitySample* out) {
  if (!q.is_object()) return Bad("\"quality\" is not an object");
  PCRFS_RETURN_IF_ERROR(GetUint(q, "measured", &out->measured));
  PCRFS_RETURN_IF_ERROR(GetUint(q, "seed", &out->seed));
  auto levels = q.find("levels");
  if (levels == q.end() || !levels->is_array() || levels->size() != kNumGroups) {
    return Bad("quality: \"levels\" must be an array of 10");
  }
  for (size_t i = 0; i < kNumGroups; ++i) {
    const Json& l = (*levels)[i];
    LevelQuality& lq = out->levels[i];
    if (!l.is_object()) return Bad("quality: a level is not an object");
    PCRFS_RETURN_IF_ERROR(GetUint(l, "n", &lq.n));
    for (const char* metric : {"psnr", "msssim"}) {
      auto m = l.find(metric);
      if (m == l.end() || !m->is_object()) {
        return Bad(std::string("quality: missing \"") + metric + "\"");
      }
      const bool psnr = metric[0] == 'p';
      PCRFS_RETURN_IF_ERROR(GetStat(*m, "mean", psnr ? &lq.mean_psnr : &lq.mean_msssim));
      PCRFS_RETURN_IF_ERROR(GetStat(*m, "p5", psnr ? &lq.p5_psnr : &lq.p5_msssim));
      PCRFS_RETURN_IF_ERROR(GetStat(*m, "min", psnr ? &lq.min_psnr : &lq.min_msssim));
    }
  }
  return Status::OK();
}

}  // namespace

std::string Manifest::ToJson() const {
  Json j;
  j["format_version"] = format_version;
  j["generator"] = generator;
  Json o;
  o["strip_metadata"] = options.strip_metadata;
  o["images_per_record"] = options.images_per_record;
  o["max_input_scans"] = options.max_input_scans;
  o["max_image_memory"] = options.max_image_memory;
  o["max_jpeg_bytes"] = options.max_jpeg_bytes;
  o["quality_sample"] = options.quality_sample;
  o["quality_seed"] = options.quality_seed;
  j["options"] = std::move(o);
  j["num_entries"] = num_entries;
  j["num_directories"] = num_directories;
  j["num_jpeg"] = num_jpeg;
  j["num_passthrough"] = num_passthrough;
  Json reasons = Json::object();
  for (const auto& [name, count] : passthrough_by_reason) reasons[name] = count;  // sorted
  j["passthrough_by_reason"] = std::move(reasons);
  j["num_records"] = num_records;
  j["source_bytes"] = source_bytes;
  j["source_jpeg_bytes"] = source_jpeg_bytes;
  j["level_bytes"] = level_bytes;
  j["jpeg_level_bytes"] = jpeg_level_bytes;
  if (quality.measured > 0) j["quality"] = QualityToJson(quality);
  // Invalid UTF-8 in the generator string must not throw: replace it.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Result<Manifest> Manifest::FromJson(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Err(Bad("not valid JSON"));
  if (!j.is_object()) return Err(Bad("not a JSON object"));
  Manifest m;
  // The version first: a newer manifest may differ in every other field.
  {
    auto it = j.find("format_version");
    if (it == j.end()) return Err(Bad("missing field \"format_version\""));
    if (!it->is_number_integer()) return Err(Bad("field \"format_version\" is not an integer"));
    if (!it->is_number_unsigned() || it->get<uint64_t>() < kOldestStoreFormatVersion ||
        it->get<uint64_t>() > kStoreFormatVersion) {
      return Err(Status::NotSupported("format version " + it->dump() +
                                      " is not supported (this pcrfs reads " +
                                      std::to_string(kOldestStoreFormatVersion) + " to " +
                                      std::to_string(kStoreFormatVersion) + ")"));
    }
    m.format_version = static_cast<uint32_t>(it->get<uint64_t>());
  }
  auto gen = j.find("generator");
  if (gen == j.end() || !gen->is_string()) return Err(Bad("missing or non-string \"generator\""));
  m.generator = gen->get<std::string>();

  auto opts = j.find("options");
  if (opts == j.end() || !opts->is_object()) return Err(Bad("missing or non-object \"options\""));
  PCRFS_RETURN_ERR_IF_ERROR(GetBool(*opts, "strip_metadata", &m.options.strip_metadata));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(*opts, "images_per_record", &m.options.images_per_record));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(*opts, "max_input_scans", &m.options.max_input_scans));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(*opts, "max_image_memory", &m.options.max_image_memory));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(*opts, "max_jpeg_bytes", &m.options.max_jpeg_bytes));
  // Added within version 1: optional, absent in the first stores.
  if (opts->contains("quality_sample")) {
    PCRFS_RETURN_ERR_IF_ERROR(GetUint(*opts, "quality_sample", &m.options.quality_sample));
  }
  if (opts->contains("quality_seed")) {
    PCRFS_RETURN_ERR_IF_ERROR(GetUint(*opts, "quality_seed", &m.options.quality_seed));
  }

  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "num_entries", &m.num_entries));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "num_directories", &m.num_directories));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "num_jpeg", &m.num_jpeg));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "num_passthrough", &m.num_passthrough));
  auto reasons = j.find("passthrough_by_reason");
  if (reasons == j.end() || !reasons->is_object()) {
    return Err(Bad("missing or non-object \"passthrough_by_reason\""));
  }
  for (auto it = reasons->begin(); it != reasons->end(); ++it) {
    if (!it->is_number_unsigned()) {
      return Err(Bad("passthrough_by_reason[\"" + it.key() + "\"] is not a count"));
    }
    m.passthrough_by_reason[it.key()] = it->get<uint64_t>();
  }
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "num_records", &m.num_records));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "source_bytes", &m.source_bytes));
  PCRFS_RETURN_ERR_IF_ERROR(GetUint(j, "source_jpeg_bytes", &m.source_jpeg_bytes));
  PCRFS_RETURN_ERR_IF_ERROR(GetLevels(j, "level_bytes", &m.level_bytes));
  PCRFS_RETURN_ERR_IF_ERROR(GetLevels(j, "jpeg_level_bytes", &m.jpeg_level_bytes));
  if (auto q = j.find("quality"); q != j.end()) {
    PCRFS_RETURN_ERR_IF_ERROR(ParseQuality(*q, &m.quality));
  }
  return m;
}

Json QualityToJson(const QualitySample& quality) {
  // JSON has no infinity: level 10's PSNR (identical pixels) is null.
  auto num = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  Json q;
  q["measured"] = quality.measured;
  q["seed"] = quality.seed;
  Json levels = Json::array();
  for (int k = 1; k <= kNumGroups; ++k) {
    const LevelQuality& l = quality.levels[static_cast<size_t>(k - 1)];
    Json lj;
    lj["level"] = k;
    lj["n"] = l.n;
    lj["psnr"] = {{"mean", num(l.mean_psnr)}, {"p5", num(l.p5_psnr)}, {"min", num(l.min_psnr)}};
    lj["msssim"] = {
        {"mean", num(l.mean_msssim)}, {"p5", num(l.p5_msssim)}, {"min", num(l.min_msssim)}};
    levels.push_back(std::move(lj));
  }
  q["levels"] = std::move(levels);
  return q;
}

int RecommendLevel(const QualitySample& q, double min_msssim) {
  if (q.measured == 0) return 0;
  for (int k = 1; k <= kNumGroups; ++k) {
    if (q.levels[static_cast<size_t>(k - 1)].p5_msssim >= min_msssim) return k;
  }
  return kNumGroups;
}

}  // namespace pcrfs::index
