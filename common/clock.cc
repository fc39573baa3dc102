#include "common/clock.h"

#include <algorithm>

namespace pcrfs::timing {
namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  WallTimePoint WallNow() const override { return std::chrono::system_clock::now(); }
  std::cv_status WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) const override REQUIRES(mu) {
    return cv->WaitUntil(mu, deadline);
  }
};

}  // namespace

const Clock* Clock::Real() {
  static const RealClock clock;
  return &clock;
}

FakeClock::FakeClock(WallTimePoint wall) : now_(TimePoint(std::chrono::hours(1))), wall_(wall) {}

Clock::TimePoint FakeClock::Now() const {
  MutexLock l(&mu_);
  return now_;
}

Clock::WallTimePoint FakeClock::WallNow() const {
  MutexLock l(&mu_);
  return wall_;
}

std::cv_status FakeClock::WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) const {
  const Waiter self{cv, mu, deadline};
  {
    MutexLock l(&mu_);
    if (now_ >= deadline) return std::cv_status::timeout;
    waiters_.push_back(&self);
  }
  waiters_cv_.SignalAll();
  // Advance takes *mu before it signals: it cannot signal between the check above and this
  // wait, which releases *mu (lock order: the waiter's mutex, then the clock's).
  cv->Wait(mu);
  MutexLock l(&mu_);
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &self));
  return now_ >= deadline ? std::cv_status::timeout : std::cv_status::no_timeout;
}

void FakeClock::Advance(std::chrono::nanoseconds d) {
  std::vector<Waiter> due;
  {
    MutexLock l(&mu_);
    now_ += d;
    wall_ += std::chrono::duration_cast<WallTimePoint::duration>(d);
    for (const Waiter* w : waiters_) {
      if (w->deadline <= now_) due.push_back(*w);
    }
  }
  for (const Waiter& w : due) {
    MutexLock l(w.mu);
    w.cv->SignalAll();
  }
}

size_t FakeClock::WaitersLocked() const {
  return static_cast<size_t>(std::count_if(waiters_.begin(), waiters_.end(),
                                           [&](const Waiter* w)
                                               REQUIRES(mu_) { return w->deadline > now_; }));
}

size_t FakeClock::waiters() const {
  MutexLock l(&mu_);
  return WaitersLocked();
}

std::optional<Clock::TimePoint> FakeClock::NextDeadline() const {
  MutexLock l(&mu_);
  std::optional<TimePoint> next;
  for (const Waiter* w : waiters_) {
    if (w->deadline > now_ && (!next || w->deadline < *next)) next = w->deadline;
  }
  return next;
}

bool FakeClock::AwaitWaiters(size_t n, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock l(&mu_);
  while (WaitersLocked() < n) {
    if (waiters_cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout) {
      return WaitersLocked() >= n;
    }
  }
  return true;
}

bool FakeClock::AwaitWaiterOr(const std::function<bool()>& done,
                              std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock l(&mu_);
  for (;;) {
    // done() without the clock's lock: it may read what is locked while the clock is read.
    const uint64_t pokes = pokes_;
    l.Unlock();
    const bool finished = done();
    l.Lock();
    if (finished) return true;
    if (WaitersLocked() >= 1) return false;
    if (pokes_ != pokes) continue;  // poked while done() ran
    if (waiters_cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout) {
      l.Unlock();
      return done();
    }
  }
}

void FakeClock::Poke() const {
  {
    MutexLock l(&mu_);
    ++pokes_;
  }
  waiters_cv_.SignalAll();
}

}  // namespace pcrfs::timing
