// Record files and metadata in an object store (remote/object_client.h): RemoteFile reads an
// object by ranged GETs, Download fetches a whole object (manifest.json, index.lmdb) into a
// local file, conditionally.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/random_access_file.h"
#include "common/speculation_source.h"
#include "remote/object_client.h"
#include "remote/range_cache.h"

namespace pcrfs {

// A RandomAccessFile over one object whose size is known in advance (the store's index knows
// every record's size, so opening one costs no request). Without a cache, Read() is one ranged
// GET into the caller's buffer through the shared client.
//
// With a RangeCache (the daemon's), what is fetched is kept, the file serves as its own
// SpeculationSource (without one it keeps nothing, so its opener hands out no hooks: nothing is
// worth reading ahead), and:
// - Read() copies what the cache holds and fetches only the rest, exact ranges in parallel; a
//   range already being fetched (by Prefetch or Warm) is waited for, not fetched twice.
// - Prefetch() starts the fetches of a demand read's ranges at once (the k pieces of a file);
//   PrefetchAll() starts them as one request where the store takes one (ObjectClient::GetRanges:
//   a web server's multi-range GET), and so does any call that starts two or more fetches.
// - Warm() is a speculative read: background requests (ObjectGet::background, so demand
//   requests always have connections), refused with ResourceExhausted unless the cache has
//   room to keep its bytes until they are read (RangeCache::ReserveAhead, taken before the
//   request is sent). PrefetchAhead likewise fetches nothing without that room. A reader that
//   takes bytes of such a fetch straight from it marks them read in the cache.
// - DropCached() forgets a range whose CRC failed, so the reread goes to the origin.
// Thread-safe; the client must outlive the file (it is shared).
class RemoteFile final : public RandomAccessFile, public SpeculationSource {
 public:
  // `key`: the object in the client's store ("records/00000042.pcr"). `size`: what the index
  // says. `cache` (may be null) keeps its bytes under `cache_id` (the record id).
  // `align` (with a cache; 0: none): every fetch is widened to multiples of it, clipped by the
  // fetches in flight and the object's end. A cache tier (nginx's slice module) fetches each
  // aligned slice from its origin once and makes a second request for a slice in flight wait
  // for it, polling every 500 ms: with the tier's slice as `align`, the file's fetches never
  // share a slice, and a read of bytes a fetch in flight brings waits for that fetch here. The
  // widened bytes are kept like the rest (the neighbours of a level's pieces are that level's).
  RemoteFile(std::shared_ptr<ObjectClient> client, std::string key, uint64_t size,
             std::shared_ptr<RangeCache> cache = nullptr, uint32_t cache_id = 0,
             uint64_t align = 0);

  // Reads exactly n bytes at offset. Errors:
  //  - Corruption "URL: read of N bytes at O is past the end (size S)" (no request is sent);
  //  - Corruption "URL: the object changed (size X, index says Y): remount" when the object's
  //    size differs from the index's (never the bytes; ObjectClient::CheckGet);
  //  - the client's errors: NotFound (404), IOError (403, and after the deadline or the last
  //    retry: EIO upstream). On an error dst's contents are undefined.
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return size_; }
  // The object's name: its URL without credentials or query.
  const std::string& name() const override { return name_; }
  // SpeculationSource: what it offers with a cache (without one: no-ops; Warm reads into
  // scratch).
  void Prefetch(uint64_t offset, uint64_t n) const override;
  void PrefetchAll(const std::vector<Span>& spans) const override;
  bool PrefetchAhead(uint64_t offset, uint64_t n) const override;
  bool PrefetchAheadAll(const std::vector<Span>& spans) const override;
  uint64_t AheadRoom() const override { return cache_ != nullptr ? cache_->AheadRoom() : 0; }
  uint64_t AheadShare() const override { return cache_ != nullptr ? cache_->AheadShare() : 0; }
  void SetOrderKnown(bool known) const override {
    if (cache_ != nullptr) cache_->SetOrderKnown(known);
  }
  // Returns the bytes it asked the origin for (0 when the cache or fetches in flight had all).
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const override;
  int ConcurrentSpeculativeReads() const override { return cache_ ? kSpeculativeRequests : 0; }
  bool DropCached(uint64_t offset, uint64_t n) const override;
  // What the cache holds, with no request (false if a byte is missing, or there is no cache).
  bool ReadCached(uint64_t offset, size_t n, uint8_t* dst) const override;

  // Speculative requests in flight at once per store (the scheduler's limit for this source):
  // what the HTTP client gives background requests with its default 16 connections per host
  // (HttpClient::kReservedForDemand stay for demand reads). Ranges planned from small folders
  // are tens of KB, so over a 20 ms link the fetch ahead is bound by requests in flight: with
  // 4, ImageNet-sized crops in folders of 10 read level 1 at 2,818 files/s, with 12 at 8,301
  // (docs/notebook/2026-11-27-scale-remote.md).
  static constexpr int kSpeculativeRequests = 12;
  // The longest fetch asked for with others in one multi-range GET: a part is handed out when
  // the whole answer is in, so a window (512 KiB and more) keeps a GET of its own, whose first
  // bytes a reader gets as they arrive. A file's pieces are a few KiB to tens of KiB.
  static constexpr uint64_t kMultiRangePart = 64 << 10;

 private:
  // One GET in flight, shared by whoever waits for its bytes. A waiter for a part of it waits
  // only until that part has arrived (ObjectGet::on_progress), not for the whole range.
  struct Fetch {
    uint64_t offset = 0, end = 0;
    std::shared_ptr<std::vector<uint8_t>> bytes;
    std::promise<Status> promise;
    std::shared_future<Status> done;
    Mutex mu;
    CondVar arrived_cv;
    uint64_t arrived GUARDED_BY(mu) = 0;   // bytes from offset that may be copied
    bool finished GUARDED_BY(mu) = false;  // the promise is set
    // A fetch ahead (its bytes reserved, kept as unread): the parts readers copied from it
    // before its bytes were in the cache, marked read there once they are (`inserted`).
    bool ahead = false;
    bool inserted GUARDED_BY(mu) = false;
    std::vector<RangeCache::Range> consumed GUARDED_BY(mu);
    // A demand read's piece fetched by Prefetch (the k pieces of a file, asked for at once):
    // it stays in Shared::pending once finished, until its reader has taken its bytes
    // (`to_read`, guarded by Shared::mu), so a cache smaller than what many readers fetch at
    // once cannot evict a piece between its arrival and its read (it was then fetched again).
    bool landed = false;
    uint64_t to_read = 0;
    bool completed = false;  // its answer came (guarded by Shared::mu)
    bool retired = false;    // a landed fetch that left `pending` (guarded by Shared::mu)
    std::chrono::steady_clock::time_point kept_at;  // when it was kept (Shared::mu)
  };
  // Waits until bytes [f->offset, until) of f may be copied (true), or f finished without
  // them (false: f->done has its status; OK when the answer was not a progressive one).
  static bool WaitArrived(Fetch& f, uint64_t until);
  // What the I/O thread's callbacks share with the file (they may outlive it).
  struct Shared {
    ~Shared();  // gives its landed bytes back to the process's bound
    Mutex mu;
    std::map<uint64_t, std::shared_ptr<Fetch>> pending GUARDED_BY(mu);  // by offset
    // Landed fetches finished and not read yet, oldest first, and their bytes: at most
    // kMaxLandedBytes per file and kMaxLandedTotal in the process are kept (a reader that never
    // came leaves its pieces to the cache).
    std::list<std::shared_ptr<Fetch>> landed GUARDED_BY(mu);
    uint64_t landed_bytes GUARDED_BY(mu) = 0;
    // Landed fetches in `pending`, in flight or kept: a read that finds none takes no lock.
    std::atomic<uint64_t> landed_live{0};
  };
  // A piece kept for a reader that did not come for it this long goes (its read failed on
  // another piece, or found the bytes elsewhere): stale ones would hold the process's bound.
  static constexpr std::chrono::seconds kLandedKept{10};
  // Landed fetch f leaves `pending` for good (counted once). REQUIRES: shared.mu held.
  static void RetireLandedLocked(Shared& shared, Fetch& f) REQUIRES(shared.mu);
  // Drops the oldest kept landed fetch. REQUIRES: shared.mu held, shared.landed not empty.
  static void DropOldestLandedLocked(Shared& shared) REQUIRES(shared.mu);
  static constexpr uint64_t kMaxLandedBytes = uint64_t{16} << 20;
  static constexpr uint64_t kMaxLandedTotal = uint64_t{64} << 20;
  // A reader took [offset, end) of f: a landed fetch leaves `pending` once all of it was taken.
  static void TakenLocked(Shared& shared, Fetch& f, uint64_t offset, uint64_t end)
      REQUIRES(shared.mu);
  // A read found [offset, end) in the cache: landed fetches of those bytes are taken too.
  void TakeLanded(uint64_t offset, uint64_t end) const;

  Status ReadUncached(uint64_t offset, size_t n, uint8_t* dst) const;
  // A GET of [offset, offset + n) into dst, checked against the index's size.
  ObjectGet RangeGet(uint64_t offset, uint64_t n, uint8_t* dst) const;
  // For each of `ranges` (widened to multiples of align_): the fetches in flight that cover
  // parts of it, and new ones for the rest (registered as pending, also appended to *started);
  // all appended to *fetches. REQUIRES: shared_->mu held.
  void CoverLocked(const std::vector<RangeCache::Range>& ranges,
                   std::vector<std::shared_ptr<Fetch>>* fetches,
                   std::vector<std::shared_ptr<Fetch>>* started) const REQUIRES(shared_->mu);
  // The parts of `missing` (ranges a Copy missed) the cache still lacks; the parts it has now
  // (a fetch ended since) are appended to *arrived. REQUIRES: shared_->mu held.
  std::vector<RangeCache::Range> StillMissingLocked(const std::vector<RangeCache::Range>& missing,
                                                    std::vector<RangeCache::Range>* arrived) const
      REQUIRES(shared_->mu);
  std::shared_ptr<Fetch> StartLocked(uint64_t offset, uint64_t end,
                                     std::vector<std::shared_ptr<Fetch>>* started) const
      REQUIRES(shared_->mu);
  // Reserves cache room for the new fetches ahead in `started` (all of them, or none: then they
  // are unregistered and *started cleared). REQUIRES: shared_->mu held.
  bool ReserveAheadLocked(std::vector<std::shared_ptr<Fetch>>* started) const REQUIRES(shared_->mu);
  // A reader copied [offset, offset + n) of fetch f: marks it read in the cache (now, or when
  // f's bytes are inserted).
  void NoteConsumed(Fetch& f, uint64_t offset, uint64_t n) const;
  // Sends the GETs of new fetches, outside any lock (a request that fails at once completes
  // on this thread), two or more of at most kMultiRangePart bytes as one
  // ObjectClient::GetRanges; each keeps its bytes in the cache (as fetched ahead if `ahead`)
  // and completes its waiters. `background`: ObjectGet::background.
  void Submit(const std::vector<std::shared_ptr<Fetch>>& started, bool background,
              bool ahead) const;
  // A fetch's answer: its bytes to the cache, kept for its reader (landed) or not, its waiters
  // woken. Runs on the client's thread, maybe after the file is gone: only shared state.
  static void Finish(const std::shared_ptr<Fetch>& f, const std::shared_ptr<Shared>& shared,
                     const std::shared_ptr<RangeCache>& cache, uint32_t id, bool ahead, Status s);
  // Prefetch, PrefetchAll and PrefetchAhead (false: no room ahead, nothing fetched).
  bool PrefetchRanges(const std::vector<Span>& spans, bool ahead) const;

  std::shared_ptr<ObjectClient> client_;
  std::string key_;
  std::string name_;
  uint64_t size_;
  std::shared_ptr<RangeCache> cache_;
  uint32_t cache_id_;
  uint64_t align_;
  std::shared_ptr<Shared> shared_;
};

struct DownloadResult {
  bool modified = false;  // false: the server said 304 (the known ETag still holds); dest untouched
  std::string etag;       // the object's ETag (the known one when not modified)
  uint64_t size = 0;      // bytes written to dest (0 when not modified)
};

// GETs object `key` into `dest`: the body goes to a temporary file beside dest ("dest.tmp-PID-N"),
// which is renamed over dest only when complete, so dest is never half-written. With a
// non-empty known_etag the request is conditional (If-None-Match): a 304 leaves dest as it is.
// Errors: the client's (NotFound for 404, ...), and IOError for the local file, naming it. The
// temporary file is removed on error. A body longer than max_bytes fails the download (IOError
// "NAME: the body is longer than N bytes") before more is written. Thread-safe for different
// dest paths.
Result<DownloadResult> Download(ObjectClient& client, const std::string& key,
                                const std::string& dest, const std::string& known_etag = "",
                                uint64_t max_bytes = uint64_t{16} << 30);

// How DownloadRanged splits a large object.
struct RangedDownloadOptions {
  uint64_t first_bytes = uint64_t{8} << 20;  // the first GET's range: a smaller object is one GET
  uint64_t part_bytes = uint64_t{4} << 20;   // the rest: ranged GETs of this size, all at once
  int restarts = 1;  // the object changed during the download: start again this many times
  // A larger object is refused (Corruption) before anything is written for it.
  uint64_t max_bytes = uint64_t{16} << 30;
  // The size the object states in its own first bytes (an index's header), given the first
  // answer's body: when it states one (> 0), the size the server claims must equal it, else
  // Corruption before anything is written (a hostile server's claim fills no disk). 0: none
  // stated (then max_bytes alone bounds it). An error fails the download as it is.
  std::function<Result<uint64_t>(std::string_view first_bytes)> declared_size;
};

// Download for a large object (a store's index): the first GET (conditional on known_etag like
// Download's: a 304 is the one request of a revalidation) asks for the first `first_bytes`;
// when the object is larger, the rest comes in ranged GETs of `part_bytes` sent together (the
// client's connection pool runs them in parallel, and its retries cover a failed range), each
// conditional on the first answer's ETag (If-Match, unless it is weak: then only compared) and
// size, written in place into a temporary file beside dest (mapped, its blocks allocated first)
// that is renamed over dest when complete. An object replaced meanwhile (a 412, another size or
// ETag) is fetched again from the start, at most `restarts` times, then Corruption "NAME: changed
// during the download N times". Without an ETag in the first answer the whole object is fetched
// again by one GET (nothing to make the ranges agree on). Errors otherwise as Download's.
// Written data is synced before the rename (a crash leaves the old file or the whole new one).
Result<DownloadResult> DownloadRanged(ObjectClient& client, const std::string& key,
                                      const std::string& dest, const std::string& known_etag = "",
                                      const RangedDownloadOptions& options = {});

}  // namespace pcrfs
