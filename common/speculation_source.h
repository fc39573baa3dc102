// What a source that keeps what it reads offers beyond reading (common/random_access_file.h):
// reading ahead of need, and the copies it keeps. The record scheduler (fs/record_scheduler.h)
// issues speculative reads through it, the page pusher (fs/page_pusher.h) assembles files from
// what it holds, and the record readers (index/) drop a kept copy whose CRC fails.
//
// Only a source that keeps bytes read once for a while (the page cache for a local file, a
// block cache for a remote one) has these hooks, since a speculative read pays only if the
// later demand read finds its bytes kept: a file's SourceFile (common/random_access_file.h)
// carries them or not, and where it does not, nothing is read speculatively from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace pcrfs {

class SpeculationSource {
 public:
  virtual ~SpeculationSource() = default;
  // Hints that [offset, offset + n) will be read soon (asynchronous readahead).
  virtual void Prefetch(uint64_t /*offset*/, uint64_t /*n*/) const {}
  // Prefetch of several ranges that one read needs (a file's pieces at its level): a source
  // that can ask for them in one request does (a web server's multi-range GET).
  struct Span {
    uint64_t offset;
    uint64_t length;
  };
  virtual void PrefetchAll(const std::vector<Span>& spans) const {
    for (const Span& s : spans) Prefetch(s.offset, s.length);
  }
  // The same for a window fetched ahead of need at a reader's request (the record scheduler's
  // promotion of a queued speculative range): fetched as promptly as Prefetch's, but its bytes
  // count as fetched ahead, unread until read, like Warm's. False, with nothing fetched, when
  // the source has no room to keep the window until it is read (AheadRoom).
  virtual bool PrefetchAhead(uint64_t offset, uint64_t n) const {
    Prefetch(offset, n);
    return true;
  }
  // PrefetchAhead of several ranges (a hinted file's pieces), all of them or none: false, with
  // nothing fetched, when the room does not hold them all. One request where the source can.
  virtual bool PrefetchAheadAll(const std::vector<Span>& spans) const {
    uint64_t bytes = 0;
    for (const Span& s : spans) bytes += s.length;
    if (AheadRoom() < bytes) return false;
    for (const Span& s : spans) PrefetchAhead(s.offset, s.length);
    return true;
  }
  // How many bytes fetched ahead now would be kept until read (UINT64_MAX: no limit the
  // source knows of, as the page cache); 0 once the source keeps enough unread bytes (when Warm
  // would be refused with ResourceExhausted).
  virtual uint64_t AheadRoom() const { return UINT64_MAX; }
  // The most AheadRoom can be: the share of the source's cache that bytes fetched ahead may
  // take (UINT64_MAX: no limit the source knows of).
  virtual uint64_t AheadShare() const { return UINT64_MAX; }
  // The readers name the files they read next (hints), or no longer do: a source whose room
  // ahead is a share of a cache may give those certain bytes a larger share.
  virtual void SetOrderKnown(bool /*known*/) const {}
  bool WantsSpeculation() const { return AheadRoom() > 0; }
  // A speculative read of [offset, offset + n): fetch it so that a later Read finds it kept.
  // `scratch` is a buffer the caller reuses. Returns the bytes it really moved from the device
  // or the origin (0 when all were kept already): what the caller may time as a transfer.
  // ResourceExhausted: the source keeps enough unread bytes already; try again later.
  virtual Result<uint64_t> Warm(uint64_t offset, uint64_t n,
                                std::vector<uint8_t>* scratch) const = 0;
  // How many speculative reads may run at once while demand reads run too, for a source that
  // orders its own requests so that demand reads never wait behind speculative ones (a remote
  // store's HTTP client: background requests get only spare connections). 0: the source has
  // one queue (a disk), and the scheduler pauses speculation while a demand read runs.
  virtual int ConcurrentSpeculativeReads() const { return 0; }
  // Drops any copy of [offset, offset + n) that the source keeps itself (a cache), so the next
  // Read fetches it from the origin; true if there was one. Called when bytes fail their CRC.
  virtual bool DropCached(uint64_t /*offset*/, uint64_t /*n*/) const { return false; }
  // Copies [offset, offset + n) into dst if the source holds all of it in memory now (the page
  // cache), without waiting for any I/O; false otherwise (dst's contents are then unspecified).
  // A read that would not wait is no work for the device, so the record scheduler does not
  // count it as a demand read holding speculative reads back.
  virtual bool ReadCached(uint64_t /*offset*/, size_t /*n*/, uint8_t* /*dst*/) const {
    return false;
  }
};

}  // namespace pcrfs
