#include "builder/source_tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "common/test_support.h"

namespace pcrfs::tools {
namespace {

// Creates `levels` nested folders of `name_len`-byte names under root with mkdirat/openat (a
// path longer than PATH_MAX cannot be made by name), and the file "leaf" with `content` at the
// bottom. Returns the relative path of the file.
std::string MakeDeepFile(const std::string& root, int levels, size_t name_len,
                         const std::string& content) {
  std::string rel;
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  for (int i = 0; i < levels; ++i) {
    std::string name = std::to_string(100 + i);
    name.resize(name_len, 'd');
    EXPECT_EQ(::mkdirat(fd, name.c_str(), 0755), 0);
    const int child = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_GE(child, 0);
    ::close(fd);
    fd = child;
    rel += name + "/";
  }
  const int file = ::openat(fd, "leaf", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  EXPECT_GE(file, 0);
  EXPECT_TRUE(WriteFull(file, content.data(), content.size(), "leaf").ok());
  ::close(file);
  ::close(fd);
  return rel + "leaf";
}

std::string ReadFd(const UniqueFd& fd) {
  auto bytes = ReadWholeFd(fd.get(), 1 << 20, "test");
  EXPECT_TRUE(bytes.has_value());
  return bytes ? std::string(bytes->begin(), bytes->end()) : "";
}

// The arena hands back every item whole from its position alone, across many blocks, with items
// of every size up to kMaxItem (none straddles two blocks).
TEST(ByteArena, ItemsReadBackWholeAcrossBlocks) {
  ByteArena arena;
  std::vector<std::pair<uint64_t, std::string>> items;
  uint64_t total = 0;
  for (size_t i = 0; total < (uint64_t{5} << 20); ++i) {
    std::string item((i * 7919) % (ByteArena::kMaxItem + 1), static_cast<char>('a' + i % 26));
    if (!item.empty()) item[0] = static_cast<char>(i);
    items.emplace_back(arena.Append(item), item);
    total += item.size();
  }
  ASSERT_GT(items.size(), 1000u);
  for (const auto& [at, item] : items) {
    ASSERT_EQ(arena.At(at, item.size()), item);
    ASSERT_GE(arena.From(at).size(), item.size());
  }
  arena.Clear();
  EXPECT_EQ(arena.Append("x"), 0u);
  EXPECT_EQ(arena.At(0, 1), "x");
}

TEST(SourceTree, NamesAndChildrenOfAWalk) {
  test::TempDir dir;
  ASSERT_EQ(::mkdir(dir.Join("src").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.Join("src/b").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.Join("src/empty").c_str(), 0755), 0);
  for (const char* f : {"src/b/y.jpg", "src/b/x.jpg", "src/a.jpg"})
    test::WriteAll(dir.Join(f), {1, 2});
  auto tree = WalkSource(dir.Join("src"));
  ASSERT_TRUE(tree.has_value());
  std::vector<std::string> root;
  for (uint32_t c : tree->Children(tree->nodes[0])) root.emplace_back(tree->Name(tree->nodes[c]));
  EXPECT_EQ(root, (std::vector<std::string>{"a.jpg", "b", "empty"}));
  std::vector<std::string> files;
  for (uint32_t f : tree->files) files.push_back(tree->RelPath(tree->nodes[f]));
  EXPECT_EQ(files, (std::vector<std::string>{"a.jpg", "b/x.jpg", "b/y.jpg"}));
  for (const SourceNode& n : tree->nodes) {
    if (!n.is_dir) {
      EXPECT_TRUE(tree->Children(n).empty());
    }
  }
}

TEST(SourceTree, WalksAndOpensFilesBelowPathMax) {
  test::TempDir dir;
  const std::string rel = MakeDeepFile(dir.path(), 30, 200, "deep content");
  ASSERT_GT(dir.path().size() + 1 + rel.size(), size_t{PATH_MAX});
  test::WriteAll(dir.Join("top"), {'t'});

  auto tree = WalkSource(dir.path());
  ASSERT_TRUE(tree.has_value()) << tree.error().ToString();
  EXPECT_TRUE(tree->problems.empty())
      << tree->problems[0].rel_path << ": " << tree->problems[0].reason;
  ASSERT_EQ(tree->files.size(), 2u);
  const uint32_t deep = tree->files[0];  // "100ddd..." sorts before "top"
  EXPECT_EQ(tree->RelPath(tree->nodes[deep]), rel);
  EXPECT_EQ(tree->nodes[deep].size, 12u);

  auto fd = tree->OpenFile(deep);
  ASSERT_TRUE(fd.has_value()) << fd.error().ToString();
  EXPECT_EQ(ReadFd(*fd), "deep content");
  // What open(2) of the whole path says, and what OpenFile avoids.
  EXPECT_LT(::open(tree->AbsPath(tree->nodes[deep]).c_str(), O_RDONLY), 0);
  EXPECT_EQ(errno, ENAMETOOLONG);

  auto top = tree->OpenFile(tree->files[1]);
  ASSERT_TRUE(top.has_value()) << top.error().ToString();
  EXPECT_EQ(ReadFd(*top), "t");
}

TEST(SourceTree, OpenFileNamesTheFileThatIsGone) {
  test::TempDir dir;
  test::WriteAll(dir.Join("gone"), {'x'});
  auto tree = WalkSource(dir.path() + "/");
  ASSERT_TRUE(tree.has_value());
  ASSERT_EQ(tree->files.size(), 1u);
  ASSERT_EQ(::unlink(dir.Join("gone").c_str()), 0);
  auto fd = tree->OpenFile(tree->files[0]);
  ASSERT_FALSE(fd.has_value());
  EXPECT_TRUE(fd.error().IsNotFound()) << fd.error().ToString();
  EXPECT_NE(fd.error().message().find(dir.Join("gone")), std::string::npos) << fd.error().message();
}

}  // namespace
}  // namespace pcrfs::tools
