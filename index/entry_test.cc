#include "index/entry.h"

#include <gtest/gtest.h>

#include <random>

namespace pcrfs::index {
namespace {

Entry MakeFile() {
  Entry e;
  e.ino = 42;
  e.parent = 7;
  e.name = "IMG_0001.JPG";
  e.kind = EntryKind::kJpeg;
  e.mode = 0644;
  e.mtime_sec = -12345678901;  // before 1970: the encoding must be sign-safe
  e.mtime_nsec = 999999999;
  e.source_size = 123456789012;
  e.record = 4000000000u;
  e.slot = 17;
  for (int g = 0; g < kNumGroups; ++g) {
    e.pieces[g].offset = (uint64_t{1} << 40) + static_cast<uint64_t>(g) * 1000;
    e.pieces[g].length = static_cast<uint64_t>(g) * 77;
    e.pieces[g].masked_crc = 0xdeadbeefu + static_cast<uint32_t>(g);
  }
  return e;
}

Entry MakeDir() {
  Entry e;
  e.ino = 7;
  e.parent = 1;
  e.name = "train";
  e.kind = EntryKind::kDirectory;
  e.mode = 0755;
  e.mtime_sec = 1700000000;
  e.first_child = 40;
  e.num_children = 5;
  e.num_subdirs = 2;
  return e;
}

void ExpectSame(const Entry& a, const Entry& b) {
  EXPECT_EQ(a.ino, b.ino);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.passthrough_reason, b.passthrough_reason);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.mtime_sec, b.mtime_sec);
  EXPECT_EQ(a.mtime_nsec, b.mtime_nsec);
  EXPECT_EQ(a.first_child, b.first_child);
  EXPECT_EQ(a.num_children, b.num_children);
  EXPECT_EQ(a.num_subdirs, b.num_subdirs);
  EXPECT_EQ(a.source_size, b.source_size);
  EXPECT_EQ(a.record, b.record);
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_EQ(a.pieces, b.pieces);
}

TEST(EntryTest, RoundTrip) {
  Entry root;
  root.ino = kRootIno;
  root.parent = kRootIno;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = 3;
  Entry pass = MakeFile();
  pass.kind = EntryKind::kPassthrough;
  pass.passthrough_reason = PassthroughReason::kCorrupt;
  for (int g = 1; g < kNumGroups; ++g) pass.pieces[g] = PieceRef{};
  Entry extreme = MakeFile();
  extreme.mtime_sec = INT64_MIN;
  extreme.source_size = UINT64_MAX;
  extreme.name = std::string(255, 'x');
  for (const Entry& e : {MakeFile(), MakeDir(), root, pass, extreme}) {
    auto d = DecodeEntry(e.ino, EncodeEntry(e));
    ASSERT_TRUE(d.has_value()) << d.error().ToString();
    ExpectSame(*d, e);
  }
}

TEST(EntryTest, EncodingIsCompact) {
  EXPECT_LT(EncodeEntry(MakeDir()).size(), 30u);
  EXPECT_LT(EncodeEntry(MakeFile()).size(), 170u);  // offsets near 2^40
}

TEST(EntryTest, EveryTruncationFails) {
  for (const Entry& e : {MakeFile(), MakeDir()}) {
    const std::string full = EncodeEntry(e);
    for (size_t n = 0; n < full.size(); ++n) {
      auto d = DecodeEntry(e.ino, std::string_view(full.data(), n));
      ASSERT_FALSE(d.has_value()) << "length " << n;
      EXPECT_TRUE(d.error().IsCorruption());
    }
    EXPECT_FALSE(DecodeEntry(e.ino, full + '\0').has_value()) << "trailing byte";
  }
}

TEST(EntryTest, RejectsBadFields) {
  auto reject = [](Entry e, uint64_t ino) {
    auto d = DecodeEntry(ino, EncodeEntry(e));
    EXPECT_FALSE(d.has_value());
  };
  Entry e = MakeFile();
  e.kind = static_cast<EntryKind>(9);
  reject(e, 42);
  e = MakeFile();
  e.name = "a/b";
  reject(e, 42);
  e.name = "..";
  reject(e, 42);
  e.name = "";
  reject(e, 42);
  e.name = std::string("a\0b", 3);
  reject(e, 42);
  e = MakeFile();
  e.mode = 010000;
  reject(e, 42);
  e = MakeFile();
  e.mtime_nsec = 1000000000;
  reject(e, 42);
  e = MakeFile();
  e.kind = EntryKind::kPassthrough;  // but with data in groups 2..10
  reject(e, 42);
  e = MakeDir();
  e.num_subdirs = 6;
  reject(e, 7);
  e = MakeDir();
  reject(e, kRootIno);  // a named root
  e = MakeFile();
  e.pieces[3].offset = UINT64_MAX;
  reject(e, 42);
}

TEST(EntryTest, GarbageNeverCrashes) {
  std::mt19937 rng(1);
  const std::string valid = EncodeEntry(MakeFile());
  int accepted = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::string s;
    if (iter % 2 == 0) {
      s.resize(rng() % 200);
      for (char& c : s) c = static_cast<char>(rng());
    } else {
      s = valid;  // mutate a valid value: reaches deeper into the decoder
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
        s[rng() % s.size()] = static_cast<char>(rng());
      }
    }
    auto d = DecodeEntry(42, s);
    if (d.has_value()) {
      ++accepted;
      // Whatever it accepts must re-encode to the same bytes: the decoder is strict.
      EXPECT_EQ(EncodeEntry(*d), s);
    }
  }
  SUCCEED() << accepted << " accepted";
}

TEST(EntryTest, IsValidName) {
  EXPECT_TRUE(IsValidName("a"));
  EXPECT_TRUE(IsValidName("..."));
  EXPECT_TRUE(IsValidName(std::string(255, 'n')));
  EXPECT_FALSE(IsValidName(std::string(256, 'n')));
  EXPECT_FALSE(IsValidName(""));
  EXPECT_FALSE(IsValidName("."));
  EXPECT_FALSE(IsValidName(".."));
  EXPECT_FALSE(IsValidName("a/b"));
  EXPECT_FALSE(IsValidName(std::string("a\0", 2)));
}

}  // namespace
}  // namespace pcrfs::index
