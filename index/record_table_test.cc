#include "index/record_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "common/test_support.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::TempDir;

using Lengths = std::array<uint64_t, kNumGroups>;
using Crcs = std::array<uint32_t, kNumGroups>;

// Regions of `region` bytes each, one after the other from offset 100.
std::array<uint64_t, kNumGroups + 1> Regions(uint64_t region) {
  std::array<uint64_t, kNumGroups + 1> o{};
  for (size_t g = 0; g <= kNumGroups; ++g) o[g] = 100 + g * region;
  return o;
}

struct Slot {
  EntryKind kind;
  Lengths length;
  Crcs crc;
};

std::vector<Slot> RandomSlots(uint32_t n, uint64_t max_length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Slot> slots(n);
  for (Slot& s : slots) {
    s.kind = rng() % 3 == 0 ? EntryKind::kPassthrough : EntryKind::kJpeg;
    for (size_t g = 0; g < kNumGroups; ++g) {
      s.length[g] = rng() % (max_length + 1);
      s.crc[g] = static_cast<uint32_t>(rng());
    }
  }
  return slots;
}

std::unique_ptr<RecordTable> Fill(const std::vector<Slot>& slots,
                                  const std::array<uint64_t, kNumGroups + 1>& regions, int groups) {
  auto t = std::make_unique<RecordTable>(static_cast<uint32_t>(slots.size()), regions, groups);
  for (uint32_t i = 0; i < slots.size(); ++i)
    t->Add(i, slots[i].kind, slots[i].length, slots[i].crc);
  return t;
}

// The fd this process holds on the table file in `folder` ("FOLDER/#N (deleted)").
int TableFd(const std::string& folder) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (dirent* de = readdir(d)) {
    char target[4096];
    const std::string link = std::string("/proc/self/fd/") + de->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    if (std::string(target, static_cast<size_t>(n)).rfind(folder + "/", 0) == 0) {
      found = atoi(de->d_name);
    }
  }
  closedir(d);
  return found;
}

// A table moved to a file gives every slot's pieces as the table in memory did, at every
// number of groups, for 32-bit and 64-bit ends; its heap is the kinds alone.
TEST(RecordTableTest, AFileTableGivesThePiecesOfTheMemoryTable) {
  TempDir dir;
  auto file = TableFile::Create(dir.path());
  ASSERT_TRUE(file.has_value()) << file.error().ToString();
  for (uint64_t region : {uint64_t{1} << 20, uint64_t{5} << 30}) {
    for (int groups : {1, 3, kNumGroups}) {
      SCOPED_TRACE(std::to_string(region) + " groups " + std::to_string(groups));
      const auto slots = RandomSlots(1000, 900, static_cast<uint32_t>(groups));
      auto mem = Fill(slots, Regions(region), groups);
      auto moved = Fill(slots, Regions(region), groups);
      const uint64_t before = moved->MemoryBytes();
      ASSERT_TRUE(moved->MoveTo(*file).ok());
      EXPECT_TRUE(moved->in_file());
      EXPECT_LE(moved->MemoryBytes(), sizeof(RecordTable) + slots.size());
      EXPECT_LT(moved->MemoryBytes() * 5, before);
      EXPECT_EQ(moved->FileBytes(), slots.size() * (static_cast<size_t>(groups) * 12 + 4));
      uint64_t expect_offset[kNumGroups] = {};
      for (uint32_t i = 0; i < slots.size(); ++i) {
        PieceRefs a{}, b{};
        ASSERT_TRUE(mem->Pieces(i, &a).ok());
        ASSERT_TRUE(moved->Pieces(i, &b).ok());
        EXPECT_EQ(moved->kind(i), slots[i].kind);
        for (size_t g = 0; g < static_cast<size_t>(groups); ++g) {
          ASSERT_EQ(a[g], b[g]) << i << " " << g;
          // Offsets are derived: each piece starts where the slot before it ended.
          ASSERT_EQ(b[g].offset, 100 + g * region + expect_offset[g]) << i << " " << g;
          ASSERT_EQ(b[g].length, slots[i].length[g]);
          ASSERT_EQ(b[g].masked_crc, slots[i].crc[g]);
          expect_offset[g] += slots[i].length[g];
        }
      }
    }
  }
}

// A stranger's table whose pieces overrun their region: the slot that does not fit and every
// later slot of that group are outside (offset UINT64_MAX), in memory and in the file alike;
// the other groups are unaffected.
TEST(RecordTableTest, APieceOutsideItsRegionStaysOutsideInTheFile) {
  TempDir dir;
  auto file = TableFile::Create(dir.path());
  ASSERT_TRUE(file.has_value());
  std::vector<Slot> slots = RandomSlots(40, 10, 7);
  slots[20].length[2] = UINT64_MAX;  // would wrap a 64-bit end
  slots[30].length[4] = 1000;        // past its 1,000-byte region with what comes before
  const auto regions = Regions(1000);
  auto mem = Fill(slots, regions, kNumGroups);
  auto moved = Fill(slots, regions, kNumGroups);
  ASSERT_TRUE(moved->MoveTo(*file).ok());
  for (const RecordTable* t : {mem.get(), moved.get()}) {
    for (uint32_t i = 0; i < slots.size(); ++i) {
      PieceRefs p{};
      ASSERT_TRUE(t->Pieces(i, &p).ok());
      EXPECT_EQ(p[2].offset == UINT64_MAX, i >= 20) << i;
      EXPECT_EQ(p[4].offset == UINT64_MAX, i >= 30) << i;
      EXPECT_NE(p[0].offset, UINT64_MAX) << i;
      for (size_t g = 0; g < kNumGroups; ++g) {
        if (p[g].offset == UINT64_MAX) continue;
        EXPECT_GE(p[g].offset, regions[g]);
        EXPECT_LE(p[g].offset + p[g].length, regions[g + 1]);
      }
    }
  }
}

// The file is the daemon's own, but bytes that come back changed (a bad disk, another writer)
// are refused: a row that fails its CRC is Corruption naming the file, never a piece.
TEST(RecordTableTest, ADamagedRowIsRefused) {
  TempDir dir;
  auto file = TableFile::Create(dir.path());
  ASSERT_TRUE(file.has_value());
  const auto slots = RandomSlots(10, 500, 3);
  auto t = Fill(slots, Regions(1 << 20), kNumGroups);
  ASSERT_TRUE(t->MoveTo(*file).ok());
  const int fd = TableFd(dir.path());
  ASSERT_GE(fd, 0);
  const size_t row = kNumGroups * 12 + 4;
  const uint8_t junk = 0x5a;
  ASSERT_EQ(pwrite(fd, &junk, 1, static_cast<off_t>(4 * row + 50)), 1);
  for (uint32_t i = 0; i < slots.size(); ++i) {
    PieceRefs p{};
    Status s = t->Pieces(i, &p);
    // Slot 4's row, read for slot 4 and (for where its pieces start) for slot 5.
    if (i == 4 || i == 5) {
      EXPECT_TRUE(s.IsCorruption()) << i << " " << s.ToString();
      EXPECT_NE(s.message().find(dir.path() + "/record tables"), std::string::npos) << s.ToString();
    } else {
      EXPECT_TRUE(s.ok()) << i << " " << s.ToString();
    }
  }
  // A file cut short: the read fails, with the file's name.
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(8 * row)), 0);
  PieceRefs p{};
  Status s = t->Pieces(9, &p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("record tables"), std::string::npos) << s.ToString();
}

// Tables take ranges of the file; a destroyed table's range is released (its bytes punched out
// on disk), so the file holds the tables alive.
TEST(RecordTableTest, ADestroyedTableReleasesItsRange) {
  TempDir dir;
  auto file = TableFile::Create(dir.path());
  ASSERT_TRUE(file.has_value());
  const auto slots = RandomSlots(20000, 100, 5);
  auto a = Fill(slots, Regions(1 << 30), kNumGroups);
  auto b = Fill(slots, Regions(1 << 30), kNumGroups);
  ASSERT_TRUE(a->MoveTo(*file).ok());
  ASSERT_TRUE(b->MoveTo(*file).ok());
  const uint64_t each = a->FileBytes();
  EXPECT_EQ((*file)->LiveBytes(), 2 * each);
  const int fd = TableFd(dir.path());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fsync(fd), 0);
  struct stat before;
  ASSERT_EQ(fstat(fd, &before), 0);
  a.reset();
  EXPECT_EQ((*file)->LiveBytes(), each);
  struct stat after;
  ASSERT_EQ(fstat(fd, &after), 0);
  // tmpfs and ext4 punch holes: fewer blocks, same size.
  EXPECT_EQ(after.st_size, before.st_size);
  EXPECT_LT(after.st_blocks, before.st_blocks);
  // b still reads right.
  PieceRefs p{};
  ASSERT_TRUE(b->Pieces(19999, &p).ok());
  EXPECT_EQ(p[0].length, slots[19999].length[0]);
}

TEST(RecordTableTest, NoFolderIsOneClearError) {
  auto file = TableFile::Create("/nonexistent/pcrfs-cache");
  ASSERT_FALSE(file.has_value());
  EXPECT_NE(file.error().message().find("/nonexistent/pcrfs-cache/record tables"),
            std::string::npos)
      << file.error().ToString();
}

}  // namespace
}  // namespace pcrfs::index
