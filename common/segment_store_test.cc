#include "common/segment_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "common/test_support.h"

namespace pcrfs {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return v;
}

std::unique_ptr<SegmentStore> OpenOk(const std::string& dir, uint64_t budget,
                                     std::vector<SegmentStore::Entry>* adopted = nullptr) {
  auto s = SegmentStore::Open(dir, budget, [&](const SegmentStore::Entry& e) {
    if (adopted != nullptr) adopted->push_back(e);
    return true;
  });
  EXPECT_TRUE(s.has_value());
  return s ? std::move(*s) : nullptr;
}

TEST(SegmentStoreTest, AppendsReadsAndAdoptsNewestFirst) {
  test::TempDir tmp;
  const std::string dir = tmp.Join("s");
  std::vector<SegmentStore::Location> where;
  {
    auto s = OpenOk(dir, 64 << 20);
    ASSERT_NE(s, nullptr);
    for (uint8_t i = 0; i < 3; ++i) {
      auto w = s->Append({100u + i, 7u - i}, Pattern(1000 + i, i), nullptr);
      ASSERT_TRUE(w);
      where.push_back(*w);
    }
    std::vector<uint8_t> part(10);
    ASSERT_TRUE(s->Read(where[1], 500, 10, part.data()).ok());
    const auto want = Pattern(1001, 1);
    EXPECT_EQ(part, std::vector<uint8_t>(want.begin() + 500, want.begin() + 510));
    s->Forget(where[0]);
    EXPECT_EQ(s->stats().dead_bytes, 1000u);
    EXPECT_EQ(s->stats().segments, 1u);
  }
  std::vector<SegmentStore::Entry> adopted;
  auto s = OpenOk(dir, 64 << 20, &adopted);
  ASSERT_EQ(adopted.size(), 3u);  // a forgotten entry is the owner's to decline
  EXPECT_EQ(adopted[0].key.a, 102u);
  EXPECT_EQ(adopted[0].key.b, 5u);
  EXPECT_TRUE(adopted[0].where == where[2]);
  std::vector<uint8_t> got(1002);
  ASSERT_TRUE(s->Read(adopted[0].where, 0, got.size(), got.data()).ok());
  EXPECT_EQ(got, Pattern(1002, 2));
  EXPECT_FALSE(s->Read(adopted[0].where, 1000, 3, got.data()).ok());  // outside the entry
}

TEST(SegmentStoreTest, EvictionNamesTheEntriesThatWent) {
  test::TempDir tmp;
  auto s = OpenOk(tmp.Join("s"), 4 << 20);  // segments of 1 MiB
  std::vector<SegmentStore::Location> where;
  std::vector<SegmentStore::Entry> evicted;
  for (uint64_t k = 0; k < 60; ++k) {
    auto w = s->Append({k, 0}, Pattern(100 << 10, static_cast<uint8_t>(k)), &evicted);
    ASSERT_TRUE(w);
    where.push_back(*w);
  }
  const auto st = s->stats();
  EXPECT_LE(st.bytes, uint64_t{4} << 20);
  EXPECT_GT(st.evicted_segments, 0u);
  EXPECT_EQ(evicted.size(), st.evicted_entries);
  // The oldest went, in order, each named with its location; the rest still read.
  for (size_t i = 0; i < evicted.size(); ++i) {
    EXPECT_EQ(evicted[i].key.a, i);
    EXPECT_TRUE(evicted[i].where == where[i]);
    EXPECT_FALSE(s->Contains(where[i].seq));
  }
  std::vector<uint8_t> got(100 << 10);
  EXPECT_EQ(s->Read(where[0], 0, got.size(), got.data()).code(), Status::Code::kNotFound);
  ASSERT_TRUE(s->Read(where.back(), 0, got.size(), got.data()).ok());
  EXPECT_EQ(got, Pattern(100 << 10, 59));
  // An entry that cannot fit the budget is refused.
  EXPECT_FALSE(s->Append({1000, 0}, Pattern(4 << 20, 1), nullptr));
}

TEST(SegmentStoreTest, OpenRemovesWhatIsNotASegment) {
  test::TempDir tmp;
  const std::string dir = tmp.Join("s");
  {
    auto s = OpenOk(dir, 1 << 20);
    ASSERT_TRUE(s->Append({1, 0}, Pattern(10, 1), nullptr));
  }
  test::WriteAll(dir + "/00000003-0-100", Pattern(100, 1));       // the old range cache layout
  test::WriteAll(dir + "/.tmp-1-2", Pattern(3, 1));               // its temporary file
  test::WriteAll(dir + "/0000000000000009.idx", Pattern(32, 1));  // no .seg
  test::WriteAll(dir + "/00000001000000000.seg", Pattern(3, 1));  // 17 digits
  uint64_t removed = 0;
  std::vector<SegmentStore::Entry> adopted;
  auto s = SegmentStore::Open(
      dir, 1 << 20,
      [&](const SegmentStore::Entry& e) {
        adopted.push_back(e);
        return true;
      },
      &removed);
  ASSERT_TRUE(s && *s);
  EXPECT_EQ(removed, 4u);
  EXPECT_EQ(adopted.size(), 1u);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 3u);  // .lock, the segment and its index
  // A second open of a locked folder: nullptr, no error.
  auto second = SegmentStore::Open(dir, 1 << 20, [](const SegmentStore::Entry&) { return true; });
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, nullptr);
}

}  // namespace
}  // namespace pcrfs
