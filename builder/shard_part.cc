#include "builder/shard_part.h"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/coding.h"
#include "common/crc32c.h"

namespace pcrfs::tools {
namespace {

constexpr char kListingMagic[] = "PCRLIST1";
constexpr char kPartKind[] = "pcrfs shard part";
constexpr uint32_t kPartVersion = 1;
constexpr uint32_t kMaxShards = 1000000;

bool ParseU32(std::string_view s, uint32_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

nlohmann::ordered_json WithoutChecksum(const ShardPart& p) {
  nlohmann::ordered_json j;
  j["kind"] = kPartKind;
  j["version"] = kPartVersion;
  j["generator"] = p.generator;
  j["source"] = p.source;
  j["options"] = p.options;
  j["shard"] = p.shard.index;
  j["shards"] = p.shard.count;
  j["num_files"] = p.num_files;
  j["num_records"] = p.num_records;
  j["record_begin"] = p.record_begin;
  j["record_end"] = p.record_end;
  j["listing_digest"] = p.listing_digest;
  j["listing_crc32c"] = Hex32(p.listing_crc32c);
  auto records = nlohmann::ordered_json::array();
  for (const PartRecord& r : p.records) {
    nlohmann::ordered_json rec = {{"id", r.id}, {"size", r.size}, {"crc32c", Hex32(r.crc32c)}};
    if (r.has_blocks) {
      auto blocks = nlohmann::ordered_json::array();
      for (const index::PieceBlockCrcs& b : r.blocks) blocks.push_back({b.slot, b.group, b.masked});
      rec["blocks"] = std::move(blocks);
    }
    records.push_back(std::move(rec));
  }
  j["records"] = std::move(records);
  auto changed = nlohmann::ordered_json::array();
  for (const ChangedFile& c : p.changed) {
    changed.push_back({c.position, c.size, c.mtime_sec, c.mtime_nsec});
  }
  j["changed"] = std::move(changed);
  return j;
}

uint32_t ParseHex32(const nlohmann::ordered_json& v) {
  const std::string s = v.get<std::string>();
  uint32_t out = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  if (ec != std::errc() || p != s.data() + s.size() || s.size() != 8) {
    throw std::invalid_argument("bad crc32c " + s);
  }
  return out;
}

}  // namespace

Result<ShardSpec> ParseShardSpec(std::string_view text) {
  const size_t slash = text.find('/');
  ShardSpec s;
  if (slash == std::string_view::npos || !ParseU32(text.substr(0, slash), &s.index) ||
      !ParseU32(text.substr(slash + 1), &s.count)) {
    return Err(Status::InvalidArgument("--shard " + std::string(text) +
                                       ": expected I/N (shard I of N, I from 0 to N-1)"));
  }
  if (s.count == 0 || s.count > kMaxShards) {
    return Err(Status::InvalidArgument("--shard " + std::string(text) +
                                       ": N must be between 1 and " + std::to_string(kMaxShards)));
  }
  if (s.index >= s.count) {
    return Err(Status::InvalidArgument("--shard " + std::string(text) +
                                       ": I must be between 0 and " + std::to_string(s.count - 1) +
                                       " (shards count from 0)"));
  }
  return s;
}

std::pair<uint32_t, uint32_t> ShardRecordRange(uint32_t num_records, ShardSpec s) {
  auto at = [&](uint64_t i) { return static_cast<uint32_t>(i * num_records / s.count); };
  return {at(s.index), at(uint64_t{s.index} + 1)};
}

std::string Fingerprint::Hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
  return buf;
}

std::string EncodeListing(const SourceTree& tree) {
  std::string out(kListingMagic);  // no root path: the same source may sit elsewhere
  PutVarint64(&out, tree.nodes.size());
  for (const SourceNode& n : tree.nodes) {
    PutLengthPrefixed(&out, tree.Name(n));
    PutVarint64(&out, n.parent);
    out.push_back(n.is_dir ? 1 : 0);
    PutVarint64(&out, n.mode);
    PutFixed64(&out, static_cast<uint64_t>(n.mtime_sec));
    PutVarint64(&out, n.mtime_nsec);
    PutVarint64(&out, n.size);
    const std::vector<uint32_t>& children = tree.Children(n);
    PutVarint64(&out, children.size());
    for (uint32_t c : children) PutVarint64(&out, c);
  }
  PutVarint64(&out, tree.files.size());
  for (uint32_t f : tree.files) PutVarint64(&out, f);
  PutVarint64(&out, tree.problems.size());
  for (const SourceProblem& p : tree.problems) {
    PutLengthPrefixed(&out, p.rel_path);
    PutLengthPrefixed(&out, p.reason);
  }
  return out;
}

Result<SourceTree> DecodeListing(std::string_view bytes) {
  const auto bad = [](const std::string& why) {
    return Err(Status::Corruption("damaged source listing: " + why));
  };
  const std::string_view magic(kListingMagic);
  if (bytes.substr(0, magic.size()) != magic) return bad("bad magic");
  Decoder d(bytes.substr(magic.size()));
  SourceTree tree;
  std::string_view sv;
  uint64_t count = 0;
  if (!d.GetVarint64(&count)) return bad("truncated");
  if (count == 0 || count > d.remaining()) return bad("bad node count");
  tree.nodes.resize(count);
  for (SourceNode& n : tree.nodes) {
    uint8_t is_dir = 0;
    uint32_t mode = 0;
    uint64_t mtime = 0, children = 0;
    if (!d.GetLengthPrefixed(&sv) || !d.GetVarint32(&n.parent) || !d.GetByte(&is_dir) ||
        !d.GetVarint32(&mode) || !d.GetFixed64(&mtime) || !d.GetVarint32(&n.mtime_nsec) ||
        !d.GetVarint64(&n.size) || !d.GetVarint64(&children) || children > d.remaining()) {
      return bad("truncated node");
    }
    if (sv.size() > 255) return bad("name longer than 255 bytes");
    if (mode > 07777) return bad("mode out of range");
    tree.SetName(&n, sv);
    n.mode = static_cast<uint16_t>(mode);
    n.is_dir = is_dir != 0;
    n.mtime_sec = static_cast<int64_t>(mtime);
    if (n.parent >= count) return bad("node parent out of range");
    if (children == 0) continue;
    n.children = static_cast<uint32_t>(tree.child_lists.size());
    std::vector<uint32_t>& kids = tree.child_lists.emplace_back(children);
    for (uint32_t& c : kids) {
      if (!d.GetVarint32(&c) || c == 0 || c >= count) return bad("child out of range");
    }
  }
  if (!d.GetVarint64(&count) || count > d.remaining()) return bad("bad file count");
  tree.files.resize(count);
  for (uint32_t& f : tree.files) {
    if (!d.GetVarint32(&f) || f >= tree.nodes.size() || tree.nodes[f].is_dir) {
      return bad("file out of range");
    }
  }
  if (!d.GetVarint64(&count) || count > d.remaining()) return bad("bad problem count");
  tree.problems.resize(count);
  for (SourceProblem& p : tree.problems) {
    std::string_view reason;
    if (!d.GetLengthPrefixed(&sv) || !d.GetLengthPrefixed(&reason)) return bad("truncated");
    p.rel_path = std::string(sv);
    p.reason = std::string(reason);
  }
  if (!d.done()) return bad("trailing bytes");
  return tree;
}

std::string ShardPart::ToJson() const {
  nlohmann::ordered_json j = WithoutChecksum(*this);
  const std::string body = j.dump(2);
  j["checksum"] = Hex32(crc32c::Value(body.data(), body.size()));
  return j.dump(2) + "\n";
}

Result<ShardPart> ShardPart::FromJson(const std::string& text) {
  try {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    if (!j.is_object() || j.value("kind", "") != kPartKind) {
      return Err(Status::Corruption("not a pcrfs shard part"));
    }
    if (j.at("version").get<uint32_t>() != kPartVersion) {
      return Err(Status::NotSupported("part version " + j.at("version").dump() +
                                      " is not supported (this pcr reads " +
                                      std::to_string(kPartVersion) + ")"));
    }
    const uint32_t checksum = ParseHex32(j.at("checksum"));
    ShardPart p;
    p.generator = j.at("generator").get<std::string>();
    p.source = j.at("source").get<std::string>();
    p.options = j.at("options").get<std::string>();
    p.shard.index = j.at("shard").get<uint32_t>();
    p.shard.count = j.at("shards").get<uint32_t>();
    p.num_files = j.at("num_files").get<uint64_t>();
    p.num_records = j.at("num_records").get<uint32_t>();
    p.record_begin = j.at("record_begin").get<uint32_t>();
    p.record_end = j.at("record_end").get<uint32_t>();
    p.listing_digest = j.at("listing_digest").get<std::string>();
    p.listing_crc32c = ParseHex32(j.at("listing_crc32c"));
    for (const auto& r : j.at("records")) {
      PartRecord rec;
      rec.id = r.at("id").get<uint32_t>();
      rec.size = r.at("size").get<uint64_t>();
      rec.crc32c = ParseHex32(r.at("crc32c"));
      if (r.contains("blocks")) {
        rec.has_blocks = true;
        for (const auto& b : r.at("blocks")) {
          rec.blocks.push_back(
              {b.at(0).get<uint32_t>(), b.at(1).get<int>(), b.at(2).get<std::vector<uint32_t>>()});
        }
      }
      p.records.push_back(std::move(rec));
    }
    for (const auto& c : j.at("changed")) {
      p.changed.push_back({c.at(0).get<uint64_t>(), c.at(1).get<uint64_t>(), c.at(2).get<int64_t>(),
                           c.at(3).get<uint32_t>()});
    }
    const std::string body = WithoutChecksum(p).dump(2);
    if (crc32c::Value(body.data(), body.size()) != checksum) {
      return Err(Status::Corruption("checksum mismatch"));
    }
    if (p.shard.count == 0 || p.shard.index >= p.shard.count ||
        ShardRecordRange(p.num_records, p.shard) != std::make_pair(p.record_begin, p.record_end) ||
        p.records.size() != p.record_end - p.record_begin) {
      return Err(Status::Corruption("inconsistent shard, record range or record list"));
    }
    for (size_t i = 0; i < p.records.size(); ++i) {
      if (p.records[i].id != p.record_begin + i) {
        return Err(Status::Corruption("record list out of order"));
      }
    }
    return p;
  } catch (const std::exception& e) {
    return Err(Status::Corruption(std::string("malformed: ") + e.what()));
  }
}

}  // namespace pcrfs::tools
