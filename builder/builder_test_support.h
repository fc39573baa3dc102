// What the tests that build stores share (library pcrfs_builder_test_support): generated source
// trees, a small build configuration, and a store's content to compare byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "builder/builder.h"

namespace pcrfs::test {

// The sizes and seeds of generated JPEGs: the i-th is (width + i * width_step) x
// (height + i * height_step) pixels, drawn with seed + i.
struct JpegSeries {
  int width = 64;
  int height = 48;
  int width_step = 0;
  int height_step = 0;
  uint32_t seed = 0;
};

// Writes the i-th JPEG of `series` at root/names[i], making the folders on the way. Throws
// std::runtime_error where a JPEG cannot be made or written.
void WriteTestJpegs(const std::string& root, const std::vector<std::string>& names,
                    const JpegSeries& series);

// Writes `size` bytes of std::mt19937(seed): data that neither compresses nor is a JPEG.
void WriteRandomFile(const std::string& path, size_t size, uint32_t seed);

// Every file of a store's content by path below it: all but provenance.json (who built it,
// when, how), so two builds of the same source compare equal.
std::map<std::string, std::vector<uint8_t>> StoreContent(const std::string& store);

// Two files per record (many records from a small tree), no quality sample, two threads.
tools::BuildConfig SmallBuildConfig(const std::string& src, const std::string& store);

}  // namespace pcrfs::test
