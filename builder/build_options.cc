#include "builder/build_options.h"

#include <map>
#include <stdexcept>

namespace pcrfs::tools {

std::string BuildOptions::Encode() const {
  return "format=" + std::to_string(index::kStoreFormatVersion) +
         " strip_metadata=" + std::to_string(store.strip_metadata) +
         " images_per_record=" + std::to_string(store.images_per_record) +
         " max_input_scans=" + std::to_string(store.max_input_scans) +
         " max_image_memory=" + std::to_string(store.max_image_memory) +
         " max_jpeg_bytes=" + std::to_string(store.max_jpeg_bytes) +
         " quality_sample=" + std::to_string(store.quality_sample) +
         " quality_seed=" + std::to_string(store.quality_seed) +
         (archive ? " archive_nested=" + std::to_string(nested_archives) : "");
}

Result<BuildOptions> BuildOptions::Decode(std::string_view text) {
  std::map<std::string, std::string, std::less<>> kv;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos) kv[std::string(item.substr(0, eq))] = item.substr(eq + 1);
    pos = end + 1;
  }
  const auto malformed = [&] {
    return Err(Status::Corruption("malformed options: " + std::string(text)));
  };
  BuildOptions o;
  try {
    if (std::stoul(kv.at("format")) != index::kStoreFormatVersion) {
      return Err(Status::NotSupported("store format " + kv.at("format") +
                                      " is not supported (this pcr writes " +
                                      std::to_string(index::kStoreFormatVersion) + ")"));
    }
    o.store.strip_metadata = kv.at("strip_metadata") == "1";
    o.store.images_per_record = static_cast<uint32_t>(std::stoul(kv.at("images_per_record")));
    o.store.max_input_scans = static_cast<uint32_t>(std::stoi(kv.at("max_input_scans")));
    o.store.max_image_memory = std::stoull(kv.at("max_image_memory"));
    o.store.max_jpeg_bytes = std::stoull(kv.at("max_jpeg_bytes"));
    o.store.quality_sample = static_cast<uint32_t>(std::stoul(kv.at("quality_sample")));
    o.store.quality_seed = std::stoull(kv.at("quality_seed"));
    if (auto it = kv.find("archive_nested"); it != kv.end()) {
      o.archive = true;
      o.nested_archives = it->second == "1";
    }
  } catch (const std::exception&) {
    return malformed();
  }
  if (o.store.images_per_record == 0) return malformed();
  return o;
}

}  // namespace pcrfs::tools
