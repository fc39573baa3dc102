// A mutex, its scoped lock and a condition variable that clang's thread-safety analysis
// understands (common/thread_annotations.h): members annotated GUARDED_BY(mu_) can be touched
// only where the analysis sees mu_ held. Thin wrappers over std::mutex and
// std::condition_variable; they cost nothing over the std types.
//
//   Mutex mu_;
//   CondVar cv_;
//   bool ready_ GUARDED_BY(mu_) = false;
//
//   void Wait() EXCLUDES(mu_) {
//     MutexLock l(&mu_);
//     while (!ready_) cv_.Wait(&mu_);
//   }
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "common/thread_annotations.h"

namespace pcrfs {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that the calling thread holds this mutex (where it cannot see it: a
  // callback called with the lock held). Checks nothing at run time.
  void AssertHeld() ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction. Unlock() and Lock() let go of it for a while
// (the destructor unlocks only if it is held).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable used with a Mutex that the caller holds. Every waiter of one CondVar
// must wait with the same Mutex (as for std::condition_variable). Waits may wake spuriously:
// wait in a loop on the condition, or use the predicate forms.
class CondVar {
 public:
  using Clock = std::chrono::steady_clock;

  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Unlocks *mu, waits for a Signal/SignalAll (or a spurious wake-up), locks *mu again.
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();  // *mu stays locked, owned by the caller
  }
  // As Wait, giving up at `deadline`: std::cv_status::timeout if it passed.
  template <class C, class D>
  std::cv_status WaitUntil(Mutex* mu, const std::chrono::time_point<C, D>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    const std::cv_status status = cv_.wait_until(l, deadline);
    l.release();
    return status;
  }
  // As Wait, giving up after `timeout`: std::cv_status::timeout if it expired.
  template <class R, class P>
  std::cv_status WaitFor(Mutex* mu, const std::chrono::duration<R, P>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, Clock::now() + timeout);
  }

  // Predicate forms: wait until pred() is true (it is called with *mu held; a lambda that reads
  // members guarded by *mu says so: `[&]() REQUIRES(mu_) { return done_; }`, as the analysis
  // cannot follow the call into this template). The timed ones return pred()'s last value.
  template <class Pred>
  void Wait(Mutex* mu, Pred pred) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) Wait(mu);
  }
  template <class C, class D, class Pred>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<C, D>& deadline, Pred pred)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) {
      if (WaitUntil(mu, deadline) == std::cv_status::timeout) return pred();
    }
    return true;
  }
  template <class R, class P, class Pred>
  bool WaitFor(Mutex* mu, const std::chrono::duration<R, P>& timeout, Pred pred)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    return WaitUntil(mu, Clock::now() + timeout, std::move(pred));
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace pcrfs
