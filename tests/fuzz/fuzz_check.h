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

}  // namespace pcrfs::fuzz
