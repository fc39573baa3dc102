#include "builder/provenance.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace pcrfs::tools {
namespace {

using Json = nlohmann::ordered_json;

Status Bad(const std::string& what) {
  return Status::Corruption(std::string(kProvenanceFile) + ": " + what);
}

template <typename T>
Status Get(const Json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return Bad(std::string("missing field \"") + key + "\"");
  try {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) return Bad(std::string("field \"") + key + "\" is not a string");
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) return Bad(std::string("field \"") + key + "\" is not a boolean");
    } else if constexpr (std::is_signed_v<T>) {
      if (!it->is_number_integer()) {
        return Bad(std::string("field \"") + key + "\" is not an integer");
      }
    } else {
      if (!it->is_number_unsigned())
        return Bad(std::string("field \"") + key + "\" is not a count");
      if (it->template get<uint64_t>() > std::numeric_limits<T>::max()) {
        return Bad(std::string("field \"") + key + "\" is out of range");
      }
    }
    *out = it->template get<T>();
  } catch (const Json::exception&) {
    return Bad(std::string("field \"") + key + "\" has the wrong type");
  }
  return Status::OK();
}

}  // namespace

std::string Provenance::ToJson() const {
  Json j;
  j["command"] = command;
  Json src;
  src["kind"] = source_kind;
  src["location"] = source;
  if (source_kind == "archive" || source_kind == "remote-archive") {
    src["nested_archives"] = nested_archives;
  }
  j["source"] = std::move(src);
  if (shards > 0) j["shards"] = shards;
  j["generator"] = generator;
  j["commit"] = commit;
  j["host"] = host;
  j["started_unix_ms"] = started_ms;
  j["finished_unix_ms"] = finished_ms;
  j["threads"] = threads;
  j["files_listed"] = files_listed;
  j["not_stored"] = not_stored;
  j["changed_while_read"] = changed;
  j["records_kept"] = records_kept;
  // Paths and host names are bytes, not necessarily UTF-8: replace what is not.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Result<Provenance> Provenance::FromJson(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Err(Bad("not valid JSON"));
  if (!j.is_object()) return Err(Bad("not a JSON object"));
  Provenance p;
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "command", &p.command));
  auto src = j.find("source");
  if (src == j.end() || !src->is_object()) return Err(Bad("missing or non-object \"source\""));
  PCRFS_RETURN_ERR_IF_ERROR(Get(*src, "kind", &p.source_kind));
  PCRFS_RETURN_ERR_IF_ERROR(Get(*src, "location", &p.source));
  if (src->contains("nested_archives")) {
    PCRFS_RETURN_ERR_IF_ERROR(Get(*src, "nested_archives", &p.nested_archives));
  }
  if (j.contains("shards")) PCRFS_RETURN_ERR_IF_ERROR(Get(j, "shards", &p.shards));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "generator", &p.generator));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "commit", &p.commit));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "host", &p.host));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "started_unix_ms", &p.started_ms));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "finished_unix_ms", &p.finished_ms));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "threads", &p.threads));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "files_listed", &p.files_listed));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "not_stored", &p.not_stored));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "changed_while_read", &p.changed));
  PCRFS_RETURN_ERR_IF_ERROR(Get(j, "records_kept", &p.records_kept));
  return p;
}

const char* SourceCommit() {
#ifdef PCRFS_COMMIT
  return PCRFS_COMMIT;
#else
  return "";
#endif
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatUtc(int64_t unix_ms) {
  const std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  if (::gmtime_r(&secs, &tm) == nullptr) return "?";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace pcrfs::tools
