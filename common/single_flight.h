// Runs a load once however many threads ask for the same key at the same time: the first
// caller of Do(key, ...) runs it, the others that ask for that key while it runs wait and get
// its result (or its exception). A later call, once the load has finished, runs it again:
// keeping results is the caller's cache's business.
//
// The usual use, with a cache whose own lock is not this one's:
//
//   if (auto hit = cache.Get(key)) return hit;
//   return flights.Do(key, [&] {
//     if (auto hit = cache.Get(key)) return hit;  // kept by a load that ended just now
//     auto v = Load();
//     cache.Put(key, v);  // before Do returns: a later leader's check above sees it
//     return v;
//   });
//
// Thread-safe. The lock is never held while a load runs.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"

namespace pcrfs {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
 public:
  SingleFlight() = default;
  SingleFlight(const SingleFlight&) = delete;
  SingleFlight& operator=(const SingleFlight&) = delete;

  // load() for key, run by this call (*ran = true) or by the call already running it (*ran =
  // false: its result, copied). An exception load() throws reaches its caller and every
  // waiter.
  template <typename Load>
  Value Do(const Key& key, Load&& load, bool* ran = nullptr) EXCLUDES(mu_) {
    std::shared_ptr<Flight> flight;
    {
      MutexLock l(&mu_);
      auto [it, inserted] = flights_.try_emplace(key);
      if (!inserted) {
        flight = it->second;
        ++waiting_;
        while (!flight->done) flight->cv.Wait(&mu_);
        --waiting_;
        if (ran != nullptr) *ran = false;
        if (flight->error) std::rethrow_exception(flight->error);
        return *flight->value;
      }
      it->second = std::make_shared<Flight>();
      flight = it->second;
    }
    if (ran != nullptr) *ran = true;
    std::optional<Value> value;
    std::exception_ptr error;
    try {
      value.emplace(std::forward<Load>(load)());
    } catch (...) {
      error = std::current_exception();
    }
    {
      MutexLock l(&mu_);
      if (error) {
        flight->error = error;
      } else {
        flight->value = *value;
      }
      flight->done = true;
      flights_.erase(key);
      flight->cv.SignalAll();
    }
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }

  // Loads running now.
  size_t in_flight() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return flights_.size();
  }
  // Calls waiting for another's load now.
  size_t waiting() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return waiting_;
  }

 private:
  // One load in progress; done, value and error are guarded by SingleFlight::mu_ (not
  // annotated: the analysis cannot name the enclosing object's mutex from a nested struct).
  struct Flight {
    CondVar cv;
    bool done = false;
    std::optional<Value> value;
    std::exception_ptr error;
  };
  mutable Mutex mu_;
  std::unordered_map<Key, std::shared_ptr<Flight>, Hash> flights_ GUARDED_BY(mu_);
  size_t waiting_ GUARDED_BY(mu_) = 0;
};

}  // namespace pcrfs
