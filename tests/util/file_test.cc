#include "util/file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ps {
namespace {

using Code = Status::Code;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/ember_file_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in),
                       std::istreambuf_iterator<char>());
  }
  // The names in the directory (temporary files included).
  size_t Entries() {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      (void)e;
      ++n;
    }
    return n;
  }

  std::string dir_;
};

TEST_F(FileTest, WritesAndReplacesAFileLeavingNoTemporary) {
  const std::string path = dir_ + "/port";
  ASSERT_TRUE(WriteStringToFileAtomically(path, "4242\n").ok());
  EXPECT_EQ(Read(path), "4242\n");
  ASSERT_TRUE(WriteStringToFileAtomically(path, std::string(100000, 'x')).ok());
  EXPECT_EQ(Read(path), std::string(100000, 'x'));
  EXPECT_EQ(Entries(), 1u);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~static_cast<unsigned>(umask(022)));
}

TEST_F(FileTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const std::string path = dir_ + "/shard";
  ASSERT_TRUE(WriteStringToFileAtomically(path, "old").ok());
  Status s = WriteFileAtomically(path, [](int fd) {
    EXPECT_EQ(write(fd, "partial", 7), 7);
    return Status::Unavailable("disk full, say");
  });
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), "disk full, say");  // the writer's own error
  EXPECT_EQ(Read(path), "old");
  EXPECT_EQ(Entries(), 1u);
}

TEST_F(FileTest, AMissingDirectoryIsNotFound) {
  Status s = WriteStringToFileAtomically(dir_ + "/no/such/file", "x");
  EXPECT_EQ(s.code(), Code::kNotFound) << s;
  EXPECT_NE(s.message().find(dir_ + "/no/such/file.tmp."), std::string::npos)
      << s;
}

TEST_F(FileTest, ADirectoryInTheWayIsUnavailable) {
  // rename(2) of a file over a non-empty directory fails: nothing changes.
  const std::string path = dir_ + "/taken";
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  ASSERT_TRUE(WriteStringToFileAtomically(path + "/inner", "x").ok());
  Status s = WriteStringToFileAtomically(path, "y");
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("cannot rename"), std::string::npos) << s;
  EXPECT_EQ(Read(path + "/inner"), "x");
  EXPECT_EQ(Entries(), 1u);
}

TEST_F(FileTest, WriteAllWritesEverythingAndReportsErrors) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ScopedFd reader(fds[0]);
  {
    ScopedFd writer(fds[1]);
    ASSERT_TRUE(WriteAll(writer.get(), "hello", 5, "the pipe").ok());
    ASSERT_TRUE(writer.Close("the pipe").ok());
    EXPECT_TRUE(writer.Close("the pipe").ok());  // a second close: nothing
  }
  char buf[8] = {};
  EXPECT_EQ(read(reader.get(), buf, sizeof(buf)), 5);
  EXPECT_EQ(std::string(buf), "hello");
  Status s = WriteAll(reader.get(), "x", 1, "the read end");
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("cannot write the read end"), std::string::npos);
}

TEST(DirNameTest, NamesTheDirectory) {
  EXPECT_EQ(DirName("/a/b/c"), "/a/b");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("a/c"), "a");
}

TEST(IoErrorTest, MapsErrnoToACode) {
  EXPECT_EQ(IoError("x", ENOENT).code(), Code::kNotFound);
  EXPECT_EQ(IoError("x", ENOSPC).code(), Code::kUnavailable);
  EXPECT_NE(IoError("open f", EACCES).message().find("open f: "),
            std::string::npos);
}

}  // namespace
}  // namespace ps
