#include "remote/fake_object_client.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pcrfs {

void MemoryObjectClient::Put(const std::string& key, std::string bytes) {
  MutexLock lock(&mu_);
  objects_[key] = Object{std::move(bytes), "\"v" + std::to_string(++puts_) + "\""};
}

void MemoryObjectClient::Remove(const std::string& key) {
  MutexLock lock(&mu_);
  objects_.erase(key);
}

uint64_t MemoryObjectClient::gets() const {
  MutexLock lock(&mu_);
  return gets_;
}

uint64_t MemoryObjectClient::bytes_served() const {
  MutexLock lock(&mu_);
  return bytes_served_;
}

std::string MemoryObjectClient::Name(std::string_view key) const {
  return key.empty() ? root_ : root_ + "/" + std::string(key);
}

Result<ObjectListing> MemoryObjectClient::List(std::string_view token, uint32_t max_keys) {
  MutexLock lock(&mu_);
  ObjectListing out;
  for (auto it = objects_.upper_bound(std::string(token)); it != objects_.end(); ++it) {
    if (out.entries.size() == max_keys) {
      out.next_token = out.entries.back().key;
      break;
    }
    out.entries.push_back({it->first, it->second.bytes.size(), 0, 0});
  }
  return out;
}

void MemoryObjectClient::DoGet(ObjectGet request, GetCallback done) {
  ObjectData d;
  std::string part;
  {
    MutexLock lock(&mu_);
    ++gets_;
    auto it = objects_.find(request.key);
    if (it == objects_.end()) {
      lock.Unlock();
      done(Err(Status::NotFound(Name(request.key) + ": 404 Not Found (NoSuchKey)")));
      return;
    }
    const Object& o = it->second;
    d.etag = o.etag;
    d.size = o.bytes.size();
    d.attempts = 1;
    if (!request.if_match.empty() && request.if_match != o.etag) {
      lock.Unlock();
      done(Err(Status::Corruption(Name(request.key) +
                                  ": 412 Precondition Failed (the object changed)")));
      return;
    }
    if (!request.if_none_match.empty() && request.if_none_match == o.etag) {
      d.not_modified = true;
    } else {
      uint64_t offset = request.range ? request.range->offset : 0;
      if (request.range && offset >= o.bytes.size()) {
        lock.Unlock();
        done(Err(Status::IOError(Name(request.key) + ": 416 Range Not Satisfiable")));
        return;
      }
      part = o.bytes.substr(offset, request.range ? request.range->length : std::string::npos);
      bytes_served_ += part.size();
    }
  }
  if (!d.not_modified) {
    d.body_bytes = part.size();
    if (request.dst != nullptr) {
      if (part.size() > request.dst_size) {
        done(Err(Status::IOError(Name(request.key) + ": the body is longer than " +
                                 std::to_string(request.dst_size) + " bytes")));
        return;
      }
      std::memcpy(request.dst, part.data(), part.size());
      if (request.on_progress && (!request.expected_size || *request.expected_size == d.size)) {
        request.on_progress(part.size());
      }
    } else if (request.max_body_bytes != 0 && part.size() > request.max_body_bytes) {
      done(Err(Status::IOError(Name(request.key) + ": the body is longer than " +
                               std::to_string(request.max_body_bytes) + " bytes")));
      return;
    } else if (!request.body_file.empty()) {
      FILE* f = std::fopen(request.body_file.c_str(), "wbe");
      if (f == nullptr) {
        done(Err(Status::FromErrno(request.body_file, errno)));
        return;
      }
      const bool ok = std::fwrite(part.data(), 1, part.size(), f) == part.size();
      if (std::fclose(f) != 0 || !ok) {
        done(Err(Status::FromErrno(request.body_file, errno)));
        return;
      }
    } else {
      d.body = std::move(part);
    }
  }
  done(std::move(d));
}

void FaultyObjectClient::Arm(Fault fault, int times, std::string key_part, Status error) {
  MutexLock lock(&mu_);
  rules_.push_back({fault, times, std::move(key_part), std::move(error)});
}

void FaultyObjectClient::Disarm() {
  MutexLock lock(&mu_);
  rules_.clear();
}

uint64_t FaultyObjectClient::fired() const {
  MutexLock lock(&mu_);
  return fired_;
}

void FaultyObjectClient::DoGet(ObjectGet request, GetCallback done) {
  std::optional<Rule> hit;
  {
    MutexLock lock(&mu_);
    for (Rule& r : rules_) {
      if (r.remaining > 0 && request.key.find(r.key_part) != std::string::npos) {
        --r.remaining;
        ++fired_;
        hit = r;
        break;
      }
    }
  }
  if (hit && hit->fault == Fault::kError) {
    done(Err(hit->error));
    return;
  }
  // Progress is withheld for a damaged answer: its bytes must never be handed out.
  if (hit) request.on_progress = nullptr;
  if (hit && hit->fault == Fault::kWholeObject && request.range) {
    // The whole object, into a body of its own: dst holds only the range asked for.
    request.range.reset();
    request.dst = nullptr;
    request.dst_size = 0;
    request.body_file.clear();
    request.max_body_bytes = 0;
  }
  // The base checks nothing here (DoGet, not Get): this client's Get checks the damaged answer.
  base_->GetUnchecked(std::move(request), [hit, done = std::move(done)](Result<ObjectData> r) {
    if (r && hit) {
      if (hit->fault == Fault::kShortBody && r->body_bytes > 0) --r->body_bytes;
      if (hit->fault == Fault::kOtherSize) ++r->size;
    }
    done(std::move(r));
  });
}

void HeldObjectClient::set_holding(bool holding) {
  {
    MutexLock lock(&mu_);
    holding_ = holding;
  }
  if (!holding) ReleaseAll();
}

std::vector<HeldObjectClient::Asked> HeldObjectClient::WaitHeld(size_t n,
                                                                std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (held_.size() < n && std::chrono::steady_clock::now() < deadline) {
    held_cv_.WaitUntil(&mu_, deadline);
  }
  std::vector<Asked> out;
  for (const Held& h : held_) {
    Asked a{h.request.key, 0, 0, h.request.background};
    if (h.request.range) {
      a.offset = h.request.range->offset;
      a.length = h.request.range->length;
    }
    out.push_back(std::move(a));
  }
  return out;
}

void HeldObjectClient::ReleaseAll() {
  std::vector<Held> held;
  {
    MutexLock lock(&mu_);
    held.swap(held_);
  }
  for (Held& h : held) base_->GetUnchecked(std::move(h.request), std::move(h.done));
}

void HeldObjectClient::DoGet(ObjectGet request, GetCallback done) {
  {
    MutexLock lock(&mu_);
    if (holding_) {
      held_.push_back({std::move(request), std::move(done)});
      held_cv_.SignalAll();
      return;
    }
  }
  base_->GetUnchecked(std::move(request), std::move(done));
}

}  // namespace pcrfs
