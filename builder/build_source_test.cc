#include "builder/build_source.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "builder/build_options.h"
#include "common/test_support.h"

namespace pcrfs::tools {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The node of the file named `name` directly under the root.
uint32_t FileNode(const SourceTree& tree, const std::string& name) {
  for (uint32_t f : tree.files) {
    if (tree.Name(tree.nodes[f]) == name) return f;
  }
  ADD_FAILURE() << "no file " << name;
  return 0;
}

TEST(BuildSource, FolderFileReadsHeadAllAndStream) {
  test::TempDir dir;
  test::WriteAll(dir.Join("a.bin"), Bytes("0123456789"));
  auto source = BuildSource::Open(dir.path(), true, RemoteOptions{});
  ASSERT_TRUE(source) << source.error().message();
  SourceTree tree = std::move((*source)->tree());
  ASSERT_EQ(tree.files.size(), 1u);
  const uint32_t node = FileNode(tree, "a.bin");

  auto file = (*source)->OpenFile(tree, node, 0);
  ASSERT_TRUE(file) << file.error().message();
  EXPECT_EQ((*file)->stat().size, 10u);
  uint8_t head[3];
  ASSERT_TRUE((*file)->ReadHead(head).ok());
  EXPECT_EQ(std::string(head, head + 3), "012");
  bool changed = false;
  auto all = (*file)->ReadAll(&changed);
  ASSERT_TRUE(all);
  EXPECT_FALSE(changed);
  EXPECT_EQ(*all, Bytes("0123456789"));
  std::vector<uint8_t> part(4);
  ASSERT_TRUE((*file)->ReadStream(0, part).ok());
  EXPECT_EQ(part, Bytes("0123"));
  std::vector<uint8_t> rest(6);
  ASSERT_TRUE((*file)->ReadStream(4, rest).ok());
  EXPECT_EQ(rest, Bytes("456789"));
  EXPECT_FALSE((*file)->changed());
}

TEST(BuildSource, FolderFileThatGrowsWhileStreamedIsChangedAndCanBeReadAgain) {
  test::TempDir dir;
  const std::string path = dir.Join("grows.bin");
  test::WriteAll(path, Bytes("abcdef"));
  auto source = BuildSource::Open(dir.path(), true, RemoteOptions{});
  ASSERT_TRUE(source);
  SourceTree tree = std::move((*source)->tree());
  auto file = (*source)->OpenFile(tree, FileNode(tree, "grows.bin"), 0);
  ASSERT_TRUE(file);
  test::WriteAll(path, Bytes("abcdefgh"));  // same inode, rewritten: longer now

  std::vector<uint8_t> all(6);
  Status s = (*file)->ReadStream(0, all);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE((*file)->changed());
  EXPECT_NE(s.message().find("changed while being read"), std::string::npos) << s.message();
  ASSERT_TRUE((*file)->Restat().ok());
  EXPECT_FALSE((*file)->changed());
  EXPECT_EQ((*file)->stat().size, 8u);
  std::vector<uint8_t> again(8);
  ASSERT_TRUE((*file)->ReadStream(0, again).ok());
  EXPECT_EQ(again, Bytes("abcdefgh"));
}

TEST(BuildSource, MissingFolderFailsNamingIt) {
  test::TempDir dir;
  auto source = BuildSource::Open(dir.Join("nope"), true, RemoteOptions{});
  ASSERT_FALSE(source);
  EXPECT_NE(source.error().message().find("nope"), std::string::npos);
}

TEST(BuildOptions, EncodeDecodeRoundTrip) {
  BuildOptions o;
  o.store = {true, 7, 100, uint64_t{1} << 30, 12345, 3, 42};
  o.archive = true;
  o.nested_archives = false;
  const std::string text = o.Encode();
  EXPECT_EQ(text, "format=" + std::to_string(index::kStoreFormatVersion) +
                      " strip_metadata=1 images_per_record=7 max_input_scans=100 "
                      "max_image_memory=1073741824 max_jpeg_bytes=12345 quality_sample=3 "
                      "quality_seed=42 archive_nested=0");
  auto back = BuildOptions::Decode(text);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->Encode(), text);
  EXPECT_TRUE(back->archive);
  EXPECT_FALSE(back->nested_archives);

  o.archive = false;  // a folder's options do not mention archives
  auto folder = BuildOptions::Decode(o.Encode());
  ASSERT_TRUE(folder);
  EXPECT_FALSE(folder->archive);
  EXPECT_EQ(o.Encode().find("archive_nested"), std::string::npos);
}

TEST(BuildOptions, DecodeRejectsOtherFormatsAndMalformedText) {
  auto other = BuildOptions::Decode(
      "format=999 strip_metadata=0 images_per_record=1 max_input_scans=1 max_image_memory=1 "
      "max_jpeg_bytes=1 quality_sample=0 quality_seed=0");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code(), Status::Code::kNotSupported);
  auto missing = BuildOptions::Decode("format=" + std::to_string(index::kStoreFormatVersion));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Status::Code::kCorruption);
  EXPECT_NE(missing.error().message().find("malformed options"), std::string::npos);
}

}  // namespace
}  // namespace pcrfs::tools
