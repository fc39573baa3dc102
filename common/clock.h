// The time that timed rules read, and the waits that honour it, as one interface: the real
// clocks in the daemon; in tests a FakeClock, which moves only when the test advances it, so a
// rule of time (the record scheduler's pauses, a credential's renewal) runs on an exact timeline
// with no sleep and no tolerance (LevelDB's Env::NowMicros, the clocks mountpoint-s3 injects).
//
// In namespace timing: several units name std::chrono clocks `Clock` in namespace pcrfs.
// Thread-safe. A FakeClock must outlive every wait on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace pcrfs::timing {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using WallTimePoint = std::chrono::system_clock::time_point;

  virtual ~Clock() = default;
  // Monotonic time (steady_clock's, on the real clock).
  virtual TimePoint Now() const = 0;
  // Calendar time (system_clock's): for times a server states, such as an expiration.
  virtual WallTimePoint WallNow() const = 0;
  // Unlocks *mu, waits until `cv` is signalled or Now() reaches `deadline`, locks *mu again:
  // std::cv_status::timeout if the deadline passed. May wake spuriously: wait in a loop.
  virtual std::cv_status WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) const
      REQUIRES(mu) = 0;
  std::cv_status WaitFor(CondVar* cv, Mutex* mu, std::chrono::nanoseconds timeout) const
      REQUIRES(mu) {
    return WaitUntil(cv, mu, Now() + timeout);
  }

  // steady_clock, system_clock and CondVar::WaitUntil (one object for the process).
  static const Clock* Real();
};

// A clock that stands still until Advance. Its waits end when a signal comes or Advance reaches
// their deadline, never in real time, so a test says exactly when a timed rule fires; it sees
// which threads wait for a time (AwaitWaiters) before it moves the clock past it.
class FakeClock final : public Clock {
 public:
  // Now() starts at an arbitrary steady time, WallNow() at `wall`.
  explicit FakeClock(WallTimePoint wall = WallTimePoint(std::chrono::hours(24 * 365 * 56)));

  TimePoint Now() const override EXCLUDES(mu_);
  WallTimePoint WallNow() const override EXCLUDES(mu_);
  std::cv_status WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) const override REQUIRES(mu)
      EXCLUDES(mu_);

  // Moves both clocks forward by `d` and wakes every wait whose deadline that reaches. Takes
  // each such waiter's mutex: never call it holding a mutex that a thread waits on it with.
  void Advance(std::chrono::nanoseconds d) EXCLUDES(mu_);
  // Threads in WaitUntil now whose deadline is still ahead.
  size_t waiters() const EXCLUDES(mu_);
  // The earliest deadline still ahead that a thread waits for (nullopt: none).
  std::optional<TimePoint> NextDeadline() const EXCLUDES(mu_);
  // Waits in real time, at most `timeout` (a bound for a broken test, not a timing), until at
  // least n threads wait for a deadline still ahead; returns whether they do.
  bool AwaitWaiters(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const
      EXCLUDES(mu_);
  // As AwaitWaiters(1, timeout), ending early once `done()` holds: done() is asked when the
  // wait starts, whenever a thread starts waiting on the clock and at every Poke(), without
  // the clock's lock held. Returns done(). What a test calls to move time on only while something
  // waits for it.
  bool AwaitWaiterOr(const std::function<bool()>& done,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30)) const
      EXCLUDES(mu_);
  // Makes AwaitWaiterOr ask its done() again (call it after changing what done() reads).
  void Poke() const EXCLUDES(mu_);

 private:
  struct Waiter {
    CondVar* cv;
    Mutex* mu;
    TimePoint deadline;
  };
  size_t WaitersLocked() const REQUIRES(mu_);

  mutable Mutex mu_;
  mutable CondVar waiters_cv_;  // a wait began
  TimePoint now_ GUARDED_BY(mu_);
  WallTimePoint wall_ GUARDED_BY(mu_);
  mutable std::vector<const Waiter*> waiters_ GUARDED_BY(mu_);
  mutable uint64_t pokes_ GUARDED_BY(mu_) = 0;
};

}  // namespace pcrfs::timing
