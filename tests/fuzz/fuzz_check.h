// Shared by the fuzz targets (tests/fuzz/*_fuzzer.cc): a check that aborts with a message, so a
// broken invariant is a crash that libFuzzer (or the replay driver) reports with the input, and
// an in-memory RandomAccessFile over the fuzzer's bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/random_access_file.h"
#include "common/status.h"

#define FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace pcrfs::fuzz {

// A RandomAccessFile over bytes the caller keeps alive. Reads past the end are Corruption,
// as PosixRandomAccessFile's are.
class SpanFile final : public RandomAccessFile {
 public:
  SpanFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset > size_ || n > size_ - offset) {
      return Status::Corruption(name_ + ": read of " + std::to_string(n) + " bytes at " +
                                std::to_string(offset) + " past the end (truncated)");
    }
    if (n != 0) std::memcpy(dst, data_ + offset, n);
    return Status::OK();
  }
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  const uint8_t* data_;
  size_t size_;
  std::string name_ = "fuzz.pcr";
};

}  // namespace pcrfs::fuzz
