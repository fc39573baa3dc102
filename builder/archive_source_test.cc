#include "builder/archive_source.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/test_support.h"

namespace pcrfs::tools {
namespace {

struct Member {
  Member(std::string n, std::string d, unsigned t = AE_IFREG, std::string l = "")
      : name(std::move(n)), data(std::move(d)), type(t), link(std::move(l)) {}
  std::string name;
  std::string data;
  unsigned type;
  std::string link;  // symlink target
};

// Writes a tar (gzip-compressed if gz) of `members` with libarchive's writer.
std::string WriteTar(const std::vector<Member>& members, bool gz) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gz) archive_write_add_filter_gzip(a);
  std::string out(size_t{1} << 20, '\0');
  size_t used = 0;
  EXPECT_EQ(archive_write_open_memory(a, out.data(), out.size(), &used), ARCHIVE_OK);
  for (const Member& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, 0640);
    archive_entry_set_mtime(e, 1700000000, 5);
    if (m.type == AE_IFLNK) archive_entry_set_symlink(e, m.link.c_str());
    archive_entry_set_size(e, m.type == AE_IFREG ? static_cast<la_int64_t>(m.data.size()) : 0);
    EXPECT_EQ(archive_write_header(a, e), ARCHIVE_OK);
    if (m.type == AE_IFREG) archive_write_data(a, m.data.data(), m.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  out.resize(used);
  return out;
}

std::string Path(const SourceTree& t, uint32_t node) { return t.RelPath(t.nodes[node]); }

TEST(NestedFolderNameTest, StripsArchiveExtensions) {
  EXPECT_EQ(NestedFolderName("n01440764.tar"), "n01440764");
  EXPECT_EQ(NestedFolderName("a.TAR.GZ"), "a");
  EXPECT_EQ(NestedFolderName("b.tgz"), "b");
  EXPECT_EQ(NestedFolderName("c.zip"), "c");
  EXPECT_EQ(NestedFolderName("d.jpg"), "");
  EXPECT_EQ(NestedFolderName(".tar"), "");
}

TEST(ArchiveSourceTest, NestedTreeInMemberOrderAndBytesInTurn) {
  test::TempDir dir;
  const std::string inner = WriteTar({{"z.txt", "zz"}, {"a.txt", "aaa"}}, true);
  const std::string path = dir.Join("outer.tar");
  const std::string tar = WriteTar({{"b/one.txt", "1"},
                                    {"cls.tar.gz", inner},
                                    {"../evil", "x"},
                                    {"b/one.txt", "dup"},
                                    {"ln", "", AE_IFLNK, "/etc/passwd"},
                                    {"a.txt", "top"}},
                                   false);
  test::WriteAll(path, std::vector<uint8_t>(tar.begin(), tar.end()));

  auto src = ArchiveSource::Open(path, /*nested=*/true);
  ASSERT_TRUE(src) << src.error().message();
  SourceTree& t = (*src)->tree();
  // Record order = member order, the nested archive expanded in place.
  std::vector<std::string> files;
  for (uint32_t f : t.files) files.push_back(Path(t, f));
  EXPECT_EQ(files, (std::vector<std::string>{"b/one.txt", "cls/z.txt", "cls/a.txt", "a.txt"}));
  // Folders are name-sorted.
  std::vector<std::string> root;
  for (uint32_t c : t.Children(t.nodes[0])) root.emplace_back(t.Name(t.nodes[c]));
  EXPECT_EQ(root, (std::vector<std::string>{"a.txt", "b", "cls"}));
  EXPECT_EQ(t.nodes[t.files[3]].mode, 0640u);
  EXPECT_EQ(t.nodes[t.files[3]].mtime_sec, 1700000000);
  ASSERT_EQ(t.problems.size(), 3u);
  EXPECT_NE(t.problems[0].reason.find(".."), std::string::npos);
  EXPECT_NE(t.problems[1].reason.find("duplicate"), std::string::npos);
  EXPECT_NE(t.problems[2].reason.find("symbolic link"), std::string::npos);

  // Pass 2: skip "cls/z.txt" (as --resume would), read the others in turn.
  (*src)->StartReading({t.files[0], t.files[2], t.files[3]});
  const std::vector<std::string> want = {"1", "aaa", "top"};
  for (size_t turn = 0; turn < want.size(); ++turn) {
    auto m = (*src)->OpenMember(turn);
    ASSERT_TRUE(m) << m.error().message();
    std::string got(want[turn].size(), '\0');
    ASSERT_TRUE(
        (*m)->ReadExact(std::span(reinterpret_cast<uint8_t*>(got.data()), got.size())).ok());
    EXPECT_EQ(got, want[turn]);
  }
  EXPECT_FALSE((*src)->OpenMember(3));  // past the end: an error, not a hang
}

TEST(ArchiveSourceTest, NoNestedKeepsArchivesAsFiles) {
  test::TempDir dir;
  const std::string path = dir.Join("o.tar");
  const std::string tar = WriteTar({{"x.tar", WriteTar({{"in", "i"}}, false)}}, false);
  test::WriteAll(path, std::vector<uint8_t>(tar.begin(), tar.end()));
  auto src = ArchiveSource::Open(path, /*nested=*/false);
  ASSERT_TRUE(src);
  ASSERT_EQ((*src)->tree().files.size(), 1u);
  EXPECT_EQ(Path((*src)->tree(), (*src)->tree().files[0]), "x.tar");
}

TEST(ArchiveSourceTest, MemberNamedTarThatIsNotAnArchiveStaysAFile) {
  test::TempDir dir;
  const std::string path = dir.Join("o.tar.gz");
  const std::string tar = WriteTar({{"fake.tar", std::string(3000, 'q')}}, true);
  test::WriteAll(path, std::vector<uint8_t>(tar.begin(), tar.end()));
  auto src = ArchiveSource::Open(path, true);
  ASSERT_TRUE(src);
  ASSERT_EQ((*src)->tree().files.size(), 1u);
  EXPECT_EQ(Path((*src)->tree(), (*src)->tree().files[0]), "fake.tar");
  EXPECT_EQ((*src)->tree().nodes[(*src)->tree().files[0]].size, 3000u);
  EXPECT_TRUE((*src)->tree().problems.empty());
}

TEST(ArchiveSourceTest, GarbageAndEmptyAreRefused) {
  test::TempDir dir;
  test::WriteAll(dir.Join("junk"), std::vector<uint8_t>(5000, 0x5a));
  EXPECT_FALSE(ProbeArchive(dir.Join("junk")).ok());
  const std::string empty = WriteTar({}, false);
  test::WriteAll(dir.Join("empty.tar"), std::vector<uint8_t>(empty.begin(), empty.end()));
  const Status s = ProbeArchive(dir.Join("empty.tar"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.message();
}

TEST(ArchiveSourceTest, CancelWakesWaiters) {
  test::TempDir dir;
  const std::string path = dir.Join("o.tar");
  const std::string tar = WriteTar({{"a", "1"}, {"b", "2"}}, false);
  test::WriteAll(path, std::vector<uint8_t>(tar.begin(), tar.end()));
  auto src = ArchiveSource::Open(path, true);
  ASSERT_TRUE(src);
  (*src)->StartReading((*src)->tree().files);
  auto first = (*src)->OpenMember(0);  // held: turn 1 cannot be served
  ASSERT_TRUE(first);
  (*src)->Cancel();
  EXPECT_FALSE((*src)->OpenMember(1));
}

}  // namespace
}  // namespace pcrfs::tools
