// The files a reader said it will read next, in its order (issue 40: the reader's order as a
// hint): a bounded first-in first-out queue of FUSE inodes between the hint server
// (fs/hint_server.h, which resolves the paths clients send) and the filesystem's hint consumer
// (Filesystem, which hands each file's level pieces to the record scheduler as speculation),
// with the counters both keep.
//
// - Bounded: at most kCapacity files queued. A full queue refuses a push (kFull): the server
//   then stops reading its sockets, so a client's writes block in its socket buffer
//   (backpressure), and reads again once room_event() says a pop or a clear made room.
// - A file queued already is not queued again (kDuplicate), from any connection.
// - A file a reader asks for before its turn is dropped (NoteRead): it is being read, fetching
//   it ahead is pointless now.
// - Each hint carries its source (a connection's number), so #reset drops one client's hints
//   (Clear(source)) and leaves the others'.
//
// Thread-safe. Calls never block on I/O; WaitPop and WaitNonEmpty block until a hint or
// Close().
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/file_util.h"
#include "common/mutex.h"

namespace pcrfs::fs {

// What became of one hint line (HintQueue::Stats::fate counts each).
enum class HintFate : uint8_t {
  kQueued,      // a file, queued
  kDuplicate,   // a file queued already (by any connection): ignored
  kNotFound,    // names nothing (or a path through a file)
  kFolder,      // names a folder
  kTooLong,     // longer than HintQueue::kMaxLineBytes: ignored whole
  kMalformed,   // a NUL byte, a ".." component, an unknown control line
  kReadBefore,  // queued, then dropped: a reader read the file before its turn
  kReset,       // queued, then dropped by #reset (Clear)
};
inline constexpr size_t kHintFates = 8;
// "queued", "duplicate", "not_found", "folder", "too_long", "malformed", "read_before", "reset".
const char* HintFateName(HintFate f);

class HintQueue {
 public:
  // Files queued at most. 16,384 inodes take ~1 MiB with their bookkeeping; a training loop's
  // epoch (1.28M files for ImageNet) waits in its own process and socket, never here. The
  // consumer is paced by the scheduler (a few MiB ahead), so a queue longer than the files
  // fetched ahead in one round trip's time gains nothing.
  static constexpr size_t kCapacity = 16384;
  // A hint line longer than this (a path of PATH_MAX) is ignored whole.
  static constexpr size_t kMaxLineBytes = 4096;

  enum class Push { kQueued, kDuplicate, kFull };

  struct Stats {
    uint64_t lines = 0;        // hint lines received (control lines and empty lines apart)
    uint64_t resets = 0;       // #reset lines
    uint64_t connections = 0;  // accepted
    uint64_t refused = 0;      // connections closed at once: too many open
    uint64_t taken = 0;        // taken by the consumer (TryPop, WaitPop)
    uint64_t queued_now = 0;
    std::array<uint64_t, kHintFates> fate{};  // by HintFate
    uint64_t count(HintFate f) const { return fate[static_cast<size_t>(f)]; }
    // {"lines":...,"queued_now":...,"taken":...,"connections":...,"refused":...,"resets":...,
    //  "queued":...,"duplicate":...,...}
    std::string ToJson() const;
  };

  explicit HintQueue(size_t capacity = kCapacity);
  HintQueue(const HintQueue&) = delete;
  HintQueue& operator=(const HintQueue&) = delete;

  // Queues `ino` (a FUSE inode) from `source` at the back; counts kQueued or kDuplicate. kFull:
  // nothing done, nothing counted (the caller keeps the line and waits for room_event()).
  Push Add(uint64_t ino, uint64_t source) EXCLUDES(mu_);
  bool full() const EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

  // The front file, taken; nullopt if none is queued (or Close() was called).
  std::optional<uint64_t> TryPop() EXCLUDES(mu_);
  // As TryPop, waiting until a file is queued, `deadline` passes or Close() is called.
  std::optional<uint64_t> WaitPop(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);
  // Waits until a file is queued (true) or Close() is called (false). Takes nothing: the
  // consumer first waits for room at the scheduler, then takes the front, so that a file read
  // meanwhile is still dropped (NoteRead).
  bool WaitNonEmpty() EXCLUDES(mu_);
  // Wakes every waiter; from now on the waits return at once and nothing is taken.
  void Close() EXCLUDES(mu_);

  // Drops the queued files of `source` (#reset of one connection), or all of them; counts
  // them as kReset. Returns how many.
  size_t Clear(uint64_t source) EXCLUDES(mu_);
  size_t Clear() EXCLUDES(mu_);

  // A reader asks for `ino`: a queued hint of it is dropped (kReadBefore). Returns whether
  // `ino` was hinted: queued, or among the last kCapacity files taken (the reader's order is
  // known for it, so the read predictor need not guess from it). Without any hint that is
  // false at the cost of one atomic load, no lock.
  bool NoteRead(uint64_t ino) EXCLUDES(mu_);

  // An eventfd that becomes readable when a pop or a clear makes room in a full queue. The
  // server polls it while it holds lines it could not queue; reading it (8 bytes) resets it.
  // Valid as long as the queue; -1 if none could be created (out of descriptors): the server
  // then looks again after a short while.
  int room_event() const { return room_event_.get(); }

  // The server's counters: a line of each HintFate it decided itself (all but kQueued and
  // kDuplicate, which Add counts), a hint line received, a #reset, a connection.
  void Count(HintFate f) EXCLUDES(mu_);
  void CountLine() EXCLUDES(mu_);
  void CountReset() EXCLUDES(mu_);
  void CountConnection(bool refused) EXCLUDES(mu_);

  Stats stats() const EXCLUDES(mu_);
  // Live and dead items held (tests): at most 2 x capacity.
  size_t items_held() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return items_.size();
  }

 private:
  struct Item {
    uint64_t ino;
    uint64_t source;
    uint64_t seq;  // the item is live while live_[ino] == seq
  };
  // Pops the front live item (dead ones, dropped by NoteRead, are skipped). REQUIRES: !closed_.
  std::optional<uint64_t> PopLocked() REQUIRES(mu_);
  // Rebuilds items_ without the dead ones and those `drop` says to drop; returns those dropped.
  template <class Drop>
  size_t CompactLocked(Drop drop) REQUIRES(mu_);
  void SignalRoomIfFullLocked(size_t live_before) REQUIRES(mu_);
  void Remember(uint64_t ino) REQUIRES(mu_);

  const size_t capacity_;
  UniqueFd room_event_;
  mutable Mutex mu_;
  CondVar nonempty_;
  bool closed_ GUARDED_BY(mu_) = false;
  // Live and dead items in order; live_ holds each live one's seq.
  std::deque<Item> items_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, uint64_t> live_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  // The last capacity_ files taken (a ring) and how often each is in it.
  std::vector<uint64_t> taken_ring_ GUARDED_BY(mu_);
  size_t taken_next_ GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, uint32_t> recently_taken_ GUARDED_BY(mu_);
  Stats stats_ GUARDED_BY(mu_);
  // live_.size() + recently_taken_.size(): NoteRead's lock-free "nothing hinted".
  std::atomic<size_t> known_{0};
};

}  // namespace pcrfs::fs
