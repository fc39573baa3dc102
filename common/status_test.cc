#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace pcrfs {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.ToErrno(), 0);
}

TEST(StatusTest, FromErrnoKeepsContextAndErrno) {
  Status s = Status::FromErrno("/x/y", ENOENT);
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.sys_errno(), ENOENT);
  EXPECT_EQ(s.ToErrno(), ENOENT);
  EXPECT_NE(s.message().find("/x/y: "), std::string::npos);
  EXPECT_EQ(Status::FromErrno("d", ENOSPC).code(), Status::Code::kResourceExhausted);
}

TEST(StatusTest, CorruptionIsEio) {
  Status s = Status::Corruption("rec: bad crc");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.ToErrno(), EIO);
  EXPECT_EQ(s.ToString(), "corruption: rec: bad crc");
}

}  // namespace
}  // namespace pcrfs
