// ObjectClients for tests without sockets (the LevelDB Env / mountpoint-s3 mock-client habit):
// MemoryObjectClient serves objects from memory; FaultyObjectClient wraps any client and makes
// chosen requests fail, come back short, or report another size; HeldObjectClient holds
// requests until the test lets them go, so what is in flight at once is seen without sleeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "remote/object_client.h"

namespace pcrfs {

// Objects in memory under "mem://NAME/". Get answers on the caller's thread. Thread-safe.
class MemoryObjectClient final : public ObjectClient {
 public:
  explicit MemoryObjectClient(std::string name = "store") : root_("mem://" + std::move(name)) {}

  // Adds or replaces an object; its ETag changes with every Put.
  void Put(const std::string& key, std::string bytes);
  void Remove(const std::string& key);
  // Requests answered (any outcome) and body bytes handed out.
  uint64_t gets() const;
  uint64_t bytes_served() const;

  Result<ObjectListing> List(std::string_view continuation_token, uint32_t max_keys) override;
  std::string Name(std::string_view key) const override;

 protected:
  void DoGet(ObjectGet request, GetCallback done) override;

 private:
  struct Object {
    std::string bytes;
    std::string etag;
  };
  const std::string root_;
  mutable Mutex mu_;
  std::map<std::string, Object> objects_ GUARDED_BY(mu_);
  uint64_t puts_ GUARDED_BY(mu_) = 0;
  uint64_t gets_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_served_ GUARDED_BY(mu_) = 0;
};

// Passes requests to `base` but for the faults armed, each for the next `times` requests whose
// key contains `key_part` ("" matches all). Thread-safe.
class FaultyObjectClient final : public ObjectClient {
 public:
  enum class Fault {
    kError,      // fail with `error`, the base never sees the request
    kShortBody,  // the answer claims one byte less than it got (a cut connection)
    kOtherSize,  // the answer says the object is one byte longer (it changed)
    // A server that ignores Range: a ranged request gets the whole object (nothing of it
    // written to dst; the answer says how many bytes came).
    kWholeObject,
  };
  explicit FaultyObjectClient(std::shared_ptr<ObjectClient> base) : base_(std::move(base)) {}

  void Arm(Fault fault, int times, std::string key_part = "", Status error = Status::OK());
  // Forgets every fault armed: the base answers every request from now on.
  void Disarm();
  // Faults fired so far.
  uint64_t fired() const;

  Result<ObjectListing> List(std::string_view continuation_token, uint32_t max_keys) override {
    return base_->List(continuation_token, max_keys);
  }
  std::string Name(std::string_view key) const override { return base_->Name(key); }

 protected:
  void DoGet(ObjectGet request, GetCallback done) override;

 private:
  struct Rule {
    Fault fault;
    int remaining;
    std::string key_part;
    Status error;
  };
  std::shared_ptr<ObjectClient> base_;
  mutable Mutex mu_;
  std::vector<Rule> rules_ GUARDED_BY(mu_);
  uint64_t fired_ GUARDED_BY(mu_) = 0;
};

// Passes requests to `base`, but while holding, keeps each one until Release: a test sees which
// requests are in flight together (a read's pieces sent at once) without timing anything.
// Thread-safe.
class HeldObjectClient final : public ObjectClient {
 public:
  explicit HeldObjectClient(std::shared_ptr<ObjectClient> base) : base_(std::move(base)) {}
  // What a held request asks for.
  struct Asked {
    std::string key;
    uint64_t offset = 0, length = 0;  // the range (0, 0: the whole object)
    bool background = false;
  };
  void set_holding(bool holding) EXCLUDES(mu_);
  // Waits until at least n requests are held or `timeout` passes; returns the requests held.
  std::vector<Asked> WaitHeld(size_t n, std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // Passes every held request on, in the order they came (their answers run on this thread).
  void ReleaseAll() EXCLUDES(mu_);

  Result<ObjectListing> List(std::string_view continuation_token, uint32_t max_keys) override {
    return base_->List(continuation_token, max_keys);
  }
  std::string Name(std::string_view key) const override { return base_->Name(key); }

 protected:
  void DoGet(ObjectGet request, GetCallback done) override EXCLUDES(mu_);

 private:
  struct Held {
    ObjectGet request;
    GetCallback done;
  };
  std::shared_ptr<ObjectClient> base_;
  Mutex mu_;
  CondVar held_cv_;
  bool holding_ GUARDED_BY(mu_) = false;
  std::vector<Held> held_ GUARDED_BY(mu_);
};

}  // namespace pcrfs
