#include "index/lmdb/lmdb_util.h"

#include "common/coding.h"
#include "index/record_format.h"

namespace pcrfs::index::lmdb {
namespace {
constexpr size_t kRecordInfoSize = 8 * (2 + kNumGroups + 1) + 4;
}  // namespace

Status LmdbError(const std::string& what, int rc) {
  const std::string msg = what + ": " + mdb_strerror(rc);
  switch (rc) {
    case MDB_NOTFOUND:
      return Status::NotFound(msg);
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_PAGE_NOTFOUND:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
    case MDB_BAD_VALSIZE:
      return Status::Corruption(msg);
    case MDB_MAP_FULL:
      return Status::ResourceExhausted(msg);
    case MDB_KEYEXIST:
      return Status::AlreadyExists(msg);
    default:
      if (rc > 0) return Status::FromErrno(what, rc);
      return Status::IOError(msg);
  }
}

std::string InoKey(uint64_t ino) {
  std::string k(8, '\0');
  EncodeBigEndian64(reinterpret_cast<uint8_t*>(k.data()), ino);
  return k;
}

std::string DirentKey(uint64_t parent, std::string_view name) {
  std::string k = InoKey(parent);
  k.append(name);
  return k;
}

std::string BlocksKey(uint64_t ino, int group) {
  std::string k = InoKey(ino);
  k.push_back(static_cast<char>(group));
  return k;
}

std::string RecordKey(uint32_t id) {
  std::string k(4, '\0');
  for (int i = 0; i < 4; ++i) k[static_cast<size_t>(i)] = static_cast<char>(id >> (8 * (3 - i)));
  return k;
}

std::string EncodeRecordInfo(const RecordInfo& r) {
  std::string out;
  PutFixed64(&out, r.file_size);
  PutFixed64(&out, r.data_offset);
  for (uint64_t off : r.group_offset) PutFixed64(&out, off);
  PutFixed32(&out, r.num_images);
  return out;
}

Result<RecordInfo> DecodeRecordInfo(uint32_t id, std::string_view v) {
  auto bad = [id](const std::string& what) {
    return Err(Status::Corruption("index record " + std::to_string(id) + ": " + what));
  };
  if (v.size() != kRecordInfoSize) return bad("wrong size");
  Decoder d(v);
  RecordInfo r;
  r.id = id;
  d.GetFixed64(&r.file_size);
  d.GetFixed64(&r.data_offset);
  for (uint64_t& off : r.group_offset) d.GetFixed64(&off);
  d.GetFixed32(&r.num_images);
  if (!d.done()) return bad("malformed");
  if (r.group_offset[0] != r.data_offset || r.data_offset < kRecordHeaderSize) {
    return bad("data offset mismatch");
  }
  for (int g = 0; g < kNumGroups; ++g) {
    if (r.group_offset[static_cast<size_t>(g) + 1] < r.group_offset[static_cast<size_t>(g)]) {
      return bad("group offsets decrease");
    }
  }
  if (r.group_offset[kNumGroups] > UINT64_MAX - kRecordFooterSize ||
      r.group_offset[kNumGroups] + kRecordFooterSize != r.file_size) {
    return bad("file size does not match the regions");
  }
  if (r.num_images > kMaxRecordImages) return bad("too many images");
  return r;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Result<MDB_env*> OpenEnv(const std::string& path, unsigned flags, size_t map_size, mode_t mode,
                         int* lmdb_rc) {
  MDB_env* env = nullptr;
  int rc = mdb_env_create(&env);
  if (rc != 0) {
    if (lmdb_rc != nullptr) *lmdb_rc = rc;
    return Err(LmdbError("mdb_env_create", rc));
  }
  if ((rc = mdb_env_set_maxdbs(env, kMaxDbs)) != 0 ||
      (rc = mdb_env_set_mapsize(env, map_size)) != 0 ||
      (rc = mdb_env_open(env, path.c_str(), flags | MDB_NOSUBDIR, mode)) != 0) {
    mdb_env_close(env);
    if (lmdb_rc != nullptr) *lmdb_rc = rc;
    return Err(LmdbError(path, rc));
  }
  return env;
}

Status OpenDbis(MDB_txn* txn, unsigned flags,
                std::initializer_list<std::pair<const char*, MDB_dbi*>> dbis,
                const std::string& what) {
  for (auto [name, dbi] : dbis) {
    int rc = mdb_dbi_open(txn, name, flags, dbi);
    if (rc != 0) return LmdbError(what + ": database \"" + name + "\"", rc);
  }
  return Status::OK();
}

}  // namespace pcrfs::index::lmdb
