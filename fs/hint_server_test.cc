// The hint protocol over a real socket, with a fake resolver: no store, no mount. Nothing
// here sleeps to assert a timing: every wait polls a condition until a deadline.
#include "fs/hint_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Polls `done` every millisecond until it holds or 30 s pass (then fails).
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

UniqueFd Connect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);
  return fd;
}

void Send(const UniqueFd& fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << std::strerror(errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// "scan1/f-N" (any padding before the dash) is file 100 + N; the fixed names below; a folder.
Result<uint64_t> FakeResolve(std::string_view path) {
  static const std::map<std::string, uint64_t, std::less<>> files = {
      {"scan1/a/b.jpg", 11}, {"scan1/c.jpg", 12}, {"scan2/c.jpg", 13}};
  if (auto it = files.find(path); it != files.end()) return it->second;
  if (path == "scan1/a" || path == "scan1" || path.empty()) {
    return Err(Status::FromErrno("folder", EISDIR));
  }
  if (path.find("..") != std::string_view::npos) return Err(Status::FromErrno("..", EINVAL));
  if (path.starts_with("scan1/f")) {
    const size_t dash = path.rfind('-');
    if (dash != std::string_view::npos)
      return 100 + std::stoull(std::string(path.substr(dash + 1)));
  }
  return Err(Status::FromErrno("no such file", ENOENT));
}

class HintServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stdfs::temp_directory_path() /
           ("pcrfs-hint-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    stdfs::remove_all(dir_);
    stdfs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    stdfs::remove_all(dir_);
  }

  void Serve(size_t capacity = HintQueue::kCapacity, std::string mount = "/mnt/data") {
    queue_ = std::make_unique<HintQueue>(capacity);
    auto s = HintServer::Listen(dir_, false);
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    server_ = std::move(*s);
    server_->Start(queue_.get(), FakeResolve, std::move(mount));
  }

  std::vector<uint64_t> PopAll() {
    std::vector<uint64_t> out;
    while (auto ino = queue_->TryPop()) out.push_back(*ino);
    return out;
  }

  // Waits until the server has received `lines` hint lines (control lines apart).
  bool Lines(uint64_t lines) {
    return Eventually([&] { return queue_->stats().lines >= lines; });
  }

  std::string dir_;
  std::unique_ptr<HintQueue> queue_;
  std::unique_ptr<HintServer> server_;
};

TEST_F(HintServerTest, LinesSplitAcrossWritesAreWholeLines) {
  Serve();
  UniqueFd c = Connect(server_->path());
  Send(c, "scan1/a");
  Send(c, "/b.jpg\nscan1/");
  Send(c, "c.jp");
  Send(c, "g\nscan2/c.jpg");  // no '\n' yet: waits
  ASSERT_TRUE(Lines(2));
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{11, 12}));
  c.Reset();  // a last line without '\n' counts once the client closes
  ASSERT_TRUE(Lines(3));
  ASSERT_TRUE(Eventually([&] { return queue_->size() == 1; }));
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{13}));
}

TEST_F(HintServerTest, GarbageMissingPathsFoldersAndDuplicatesAreIgnoredAndCounted) {
  Serve();
  UniqueFd c = Connect(server_->path());
  std::string lines = "nope.jpg\nscan1/a\nscan1/c.jpg\nscan1/../c.jpg\n#what\n\nscan1/c.jpg\n";
  lines += "scan1/c.jpg\xff\xfe\n";  // bytes that are no UTF-8: a name that is not there
  lines += "scan1/a/b.jpg\n";
  lines += std::string("scan1/\0.jpg\n", 12);
  Send(c, lines);
  ASSERT_TRUE(Lines(9));
  const HintQueue::Stats s = queue_->stats();
  EXPECT_EQ(s.count(HintFate::kQueued), 2u);
  EXPECT_EQ(s.count(HintFate::kNotFound), 2u);
  EXPECT_EQ(s.count(HintFate::kFolder), 1u);
  EXPECT_EQ(s.count(HintFate::kMalformed), 3u);  // "..", #what, the NUL
  EXPECT_EQ(s.count(HintFate::kDuplicate), 1u);
  EXPECT_EQ(s.lines, 9u);  // the empty line is nothing
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{12, 11}));
}

TEST_F(HintServerTest, LongLinesAreIgnoredWholeEvenAcrossWrites) {
  Serve();
  UniqueFd c = Connect(server_->path());
  const std::string longest = "scan1/" + std::string(HintQueue::kMaxLineBytes - 6, 'x');
  Send(c, longest + "\n");  // exactly the limit: a path, which names nothing
  Send(c, std::string(3000, 'y'));
  Send(c, std::string(3000, 'y'));   // past the limit before its end came
  Send(c, std::string(70000, 'y'));  // more than one read's worth
  Send(c, "y\nscan1/c.jpg\n" + longest + "z\nscan1/a/b.jpg\n");
  ASSERT_TRUE(Lines(5));
  const HintQueue::Stats s = queue_->stats();
  EXPECT_EQ(s.count(HintFate::kTooLong), 2u);
  EXPECT_EQ(s.count(HintFate::kNotFound), 1u);
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{12, 11}));
}

TEST_F(HintServerTest, AbsolutePathsLoseTheMountPointOrTheirSlash) {
  Serve(HintQueue::kCapacity, "/mnt/data/");
  UniqueFd c = Connect(server_->path());
  Send(c, "/mnt/data/scan1/c.jpg\n//scan1/a/b.jpg\n/mnt/data2/scan2/c.jpg\n/mnt/datascan2/c.jpg\n");
  ASSERT_TRUE(Lines(4));
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{12, 11}));
  EXPECT_EQ(queue_->stats().count(HintFate::kNotFound), 2u);
}

TEST_F(HintServerTest, ResetDropsOnlyItsOwnConnectionsHintsAndClosingKeepsThem) {
  Serve();
  UniqueFd a = Connect(server_->path());
  UniqueFd b = Connect(server_->path());
  Send(a, "scan1/f-1\nscan1/f-2\n");
  Send(b, "scan1/f-3\n");
  ASSERT_TRUE(Eventually([&] { return queue_->size() == 3; }));
  Send(a, "#reset\nscan1/f-4\n");
  ASSERT_TRUE(Eventually([&] { return queue_->stats().lines == 4; }));
  EXPECT_EQ(queue_->stats().resets, 1u);
  EXPECT_EQ(queue_->stats().count(HintFate::kReset), 2u);
  b.Reset();  // closing leaves f-3 queued: still a read to come
  Send(a, "scan1/f-5\n");
  ASSERT_TRUE(Lines(5));
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{103, 104, 105}));
}

TEST_F(HintServerTest, AFullQueueStopsTheServerReadingUntilThereIsRoom) {
  constexpr size_t kCapacity = 4;
  constexpr uint64_t kLines = 5000;
  Serve(kCapacity);
  UniqueFd c = Connect(server_->path());
  // Long lines, so that the socket buffers fill with fewer of them.
  std::string all;
  for (uint64_t i = 0; i < kLines; ++i)
    all += "scan1/f" + std::string(200, 'p') + "-" + std::to_string(i) + "\n";
  ASSERT_EQ(::fcntl(c.get(), F_SETFL, O_NONBLOCK), 0);
  size_t sent = 0;
  // The client writes until its writes would block: the server reads no more once the queue
  // is full, or this would never end (and lines would be lost, which the end checks).
  ASSERT_TRUE(Eventually([&] {
    const ssize_t n = ::send(c.get(), all.data() + sent, all.size() - sent, MSG_NOSIGNAL);
    if (n > 0) sent += static_cast<size_t>(n);
    return n < 0 && errno == EAGAIN && queue_->full();
  }));
  EXPECT_LT(sent, all.size());
  EXPECT_EQ(queue_->size(), kCapacity);
  // Taking files lets it read again: every line arrives, in order, none lost.
  std::vector<uint64_t> got;
  ASSERT_TRUE(Eventually([&] {
    if (sent < all.size()) {
      const ssize_t n = ::send(c.get(), all.data() + sent, all.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
    } else if (c.valid()) {
      c.Reset();  // what the server still holds of a closed client is handled all the same
    }
    while (auto ino = queue_->TryPop()) got.push_back(*ino);
    return got.size() == kLines;
  }));
  for (uint64_t i = 0; i < kLines; ++i) ASSERT_EQ(got[i], 100 + i) << i;
  EXPECT_EQ(queue_->stats().lines, kLines);
}

TEST_F(HintServerTest, SeveralClientsAtOnceKeepEachOnesOrder) {
  Serve();
  constexpr int kClients = 8, kEach = 300;
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k) {
    clients.emplace_back([&, k] {
      UniqueFd c = Connect(server_->path());
      for (int i = 0; i < kEach; ++i) Send(c, "scan1/f-" + std::to_string(k * kEach + i) + "\n");
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_TRUE(Lines(kClients * kEach));
  const std::vector<uint64_t> got = PopAll();
  ASSERT_EQ(got.size(), static_cast<size_t>(kClients * kEach));
  std::vector<uint64_t> last(kClients, 0);
  for (uint64_t ino : got) {
    const uint64_t n = ino - 100;
    const size_t k = n / kEach;
    EXPECT_TRUE(last[k] == 0 || n > last[k]) << n;
    last[k] = n;
  }
  EXPECT_EQ(queue_->stats().connections, static_cast<uint64_t>(kClients));
}

TEST_F(HintServerTest, ConnectionsPastTheCapAreClosedAtOnce) {
  Serve();
  std::vector<UniqueFd> held;
  for (size_t i = 0; i < HintServer::kMaxConnections; ++i) held.push_back(Connect(server_->path()));
  ASSERT_TRUE(
      Eventually([&] { return queue_->stats().connections == HintServer::kMaxConnections; }));
  UniqueFd extra = Connect(server_->path());
  ASSERT_TRUE(Eventually([&] { return queue_->stats().refused == 1; }));
  pollfd p{extra.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1);
  char byte;
  EXPECT_EQ(::recv(extra.get(), &byte, 1, 0), 0);  // closed by the server
  // The others still work, and a freed slot takes a new client.
  held.pop_back();
  Send(held[0], "scan1/c.jpg\n");
  ASSERT_TRUE(Lines(1));
  UniqueFd again = Connect(server_->path());
  Send(again, "scan1/a/b.jpg\n");
  ASSERT_TRUE(Lines(2));
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{12, 11}));
}

TEST_F(HintServerTest, StopWithAClientConnectedRemovesTheSocketAndItsFolder) {
  Serve();
  UniqueFd c = Connect(server_->path());
  Send(c, "scan1/c.jpg\nscan1/a/b");  // half a line pending
  ASSERT_TRUE(Lines(1));
  const std::string path = server_->path();
  server_->Stop();
  EXPECT_FALSE(stdfs::exists(path));
  EXPECT_FALSE(stdfs::exists(dir_));  // it was empty but for the socket
  pollfd p{c.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1);
  char byte;
  EXPECT_EQ(::recv(c.get(), &byte, 1, 0), 0);
  EXPECT_EQ(::send(c.get(), "x\n", 2, MSG_NOSIGNAL), -1);
  EXPECT_EQ(PopAll(), (std::vector<uint64_t>{12}));  // what it queued stays
  server_->Stop();                                   // idempotent
}

TEST_F(HintServerTest, TheSocketIsPrivateUnlessEveryUserMayReadTheMount) {
  for (const bool any_user : {false, true}) {
    auto dir = HintServer::MakeSocketDir(any_user);
    ASSERT_TRUE(dir.has_value()) << dir.error().ToString();
    struct stat st;
    ASSERT_EQ(::lstat(dir->c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_uid, ::geteuid());
    EXPECT_EQ(st.st_mode & 07777, any_user ? 0711u : 0700u);
    EXPECT_NE(stdfs::path(*dir).filename().string().find("mnt-"), std::string::npos) << *dir;
    // Its parent is writable by this user alone, unless it is /tmp (sticky: mkdtemp's folder
    // is this process's all the same).
    ASSERT_EQ(::lstat(stdfs::path(*dir).parent_path().c_str(), &st), 0);
    if ((st.st_mode & S_ISVTX) == 0) {
      EXPECT_EQ(st.st_mode & 022, 0u) << *dir;
    }
    auto server = HintServer::Listen(*dir, any_user);
    ASSERT_TRUE(server.has_value()) << server.error().ToString();
    ASSERT_EQ(::lstat((*server)->path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, any_user ? 0666u : 0600u);
    const std::string path = (*server)->path();
    server->reset();  // never started: removes all the same
    EXPECT_FALSE(stdfs::exists(path));
    EXPECT_FALSE(stdfs::exists(*dir));
  }
}

TEST_F(HintServerTest, ASocketPathTooLongIsRefusedClearly) {
  auto s = HintServer::Listen("/" + std::string(120, 'd'), false);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message().find("longer than"), std::string::npos) << s.error().ToString();
}

}  // namespace
}  // namespace pcrfs::fs
