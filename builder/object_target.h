// Stores and parts written straight into object storage (docs/sharding.md, "Object storage"):
// `pcr build SRC s3://B/P [--shard I/N]` and `pcr merge PART... s3://B/P`.
//
// The draft is a local STORE.partial as for a local store, in the URL's cache folder
// (-o cache_dir, else DefaultCacheDir). Each record is uploaded as soon as it is finished
// (ObjectWriter::PutFile: multipart above 8 MiB), then its members' fingerprint, size and
// CRC32C as P/.build/NNNNNNNN.members, and removed from the draft: local disk holds one record
// and the index; the index stage reads the records' tables from the bucket. Publishing uploads the
// other files, manifest.json and index.pcri (a part: listing.bin, then part.json) last, then
// removes P/.build/: a mount needs index.pcri and a merge needs part.json, so nothing at P is taken
// for a store or a part before it is whole.
//
// --resume lists P: a record whose .build members object is there and whose object has the
// size it gives is kept, its bytes checked against the CRC32C it gives (read from the draft
// when this machine has it, else downloaded into it: a task requeued on another node resumes),
// then read from the bucket.
//
// A merge copies the parts' records on the server (CopyObject; UploadPartCopy above 5 GiB)
// and reads only their tables (ranged GETs) and the quality sample's pieces.
//
// One writer per URL is the caller's to ensure: the writer lock is on the local draft only.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "builder/draft_sink.h"
#include "common/mutex.h"
#include "location/store_location.h"
#include "remote/object_writer.h"

namespace pcrfs::tools {

// Whether `store` is a URL ("scheme://..."), not a local path.
bool IsOutputUrl(const std::string& store);
// s3:// and Azure (az://, https://ACCOUNT.blob.core.windows.net/...) are written; anything else
// is InvalidArgument, one line naming the URL.
Status CheckOutputUrl(const std::string& store);

class ObjectTarget final : public DraftSink {
 public:
  // Resolves the URL as a remote store's location (region, endpoint, credentials) and makes
  // its clients. Errors: CheckOutputUrl's, ResolveLocation's.
  static Result<std::unique_ptr<ObjectTarget>> Open(const std::string& url,
                                                    const RemoteOptions& options);
  ~ObjectTarget() override;

  const std::string& name() const { return location_.name; }
  // The local STORE whose STORE.partial is the draft (its parent folder exists).
  const std::string& local_store() const { return local_store_; }
  ObjectWriter& writer() { return *writer_; }
  ObjectClient& client() { return *client_; }

  // Lists the prefix. AlreadyExists when it holds a store or a part (unless force: then the
  // old one's index.pcri, manifest.json and part.json are removed first, so no mount takes
  // the half-replaced store for a whole one); InvalidArgument when it holds objects that are
  // not a store's, or an interrupted build's records without resume or force.
  Status CheckAndClear(bool force, bool resume);
  // --resume: the local draft's build state made the remote one's (see above): each kept
  // record checked (downloaded when the draft has not got it) and then read from the bucket.
  // Before StoreDraft::Prepare.
  Status PrepareResume();
  // A merge: record `id` is copied to the target (size bytes): read from there, not the draft.
  void AddCopiedRecord(uint32_t id, uint64_t size);

  // DraftSink.
  // Uploads the record and its .build object, then removes the local file: from then on the
  // record is read from the bucket (its table for the index, the quality sample's pieces).
  Status RecordFinished(uint32_t id, const std::string& path,
                        const std::string& fingerprint) override;
  bool RecordSizeAndCrc(uint32_t id, uint64_t* size, uint32_t* crc) override;
  Result<std::unique_ptr<RandomAccessFile>> OpenRecord(uint32_t id,
                                                       const std::string& path) override;
  Result<std::unique_ptr<index::Store>> OpenStore(const std::string& dir) override;
  Status Publish(const std::string& dir) override;

 private:
  ObjectTarget() = default;
  // Every object under the prefix, with its size.
  Result<std::map<std::string, uint64_t>> ListAll();

  StoreLocation location_;
  std::string local_store_;
  std::shared_ptr<ObjectClient> client_;
  std::unique_ptr<ObjectWriter> writer_;
  bool options_uploaded_ = false;
  Mutex mu_;
  // Records in the bucket and not in the draft (uploaded, kept by --resume, copied by a
  // merge): id -> size, and CRC32C where known.
  std::map<uint32_t, uint64_t> copied_ GUARDED_BY(mu_);
  std::map<uint32_t, uint32_t> crcs_ GUARDED_BY(mu_);
  std::set<uint32_t> written_ GUARDED_BY(mu_);  // records of this store
};

// The object writer (S3ObjectWriter) and client of a part or a store at `url`, for reading a
// part and copying its records. Errors: CheckOutputUrl's, ResolveLocation's.
struct ObjectPart {
  StoreLocation location;
  std::shared_ptr<ObjectClient> client;
  std::unique_ptr<ObjectWriter> writer;
  static Result<std::unique_ptr<ObjectPart>> Open(const std::string& url,
                                                  const RemoteOptions& options);
};

}  // namespace pcrfs::tools
