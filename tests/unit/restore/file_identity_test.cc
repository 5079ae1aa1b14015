// CheckSameFile: the file a restore finds is the process's, on its own machine or on another
// that mounts the same filesystem; every refusal says which identity differs.
#include "engine/restore/file_identity.h"

#include <sys/sysmacros.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::restore {
namespace {

using ::testing::HasSubstr;

struct stat Stat(dev_t dev, ino_t ino, off_t size, time_t mtime_s) {
  struct stat st {};
  st.st_dev = dev;
  st.st_ino = ino;
  st.st_size = size;
  st.st_mtim.tv_sec = mtime_s;
  return st;
}

image::FileId Id(uint64_t dev, uint64_t ino, uint64_t size, int64_t mtime_s) {
  image::FileId id;
  id.set_dev(dev);
  id.set_ino(ino);
  id.set_size(size);
  id.set_mtime_ns(mtime_s * 1000000000LL);
  return id;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(FileIdentityTest, TheSameFileHereOrMountedOnAnotherMachine) {
  image::FileId id = Id(makedev(8, 1), 1234, 100, 1700000000);
  EXPECT_TRUE(CheckSameFile(Stat(makedev(8, 1), 1234, 100, 1700000000), id, "f").ok());
  // Written to since, on the same device: a descriptor's file may have grown.
  EXPECT_TRUE(CheckSameFile(Stat(makedev(8, 1), 1234, 150, 1700000100), id, "f").ok());
  // Another machine's mount of the same filesystem: another device number, all else equal.
  EXPECT_TRUE(CheckSameFile(Stat(makedev(0, 44), 1234, 100, 1700000000), id, "f").ok());
}

TEST(FileIdentityTest, EachRefusalNamesWhatDiffers) {
  image::FileId id = Id(makedev(8, 1), 1234, 100, 1700000000);
  absl::Status other = CheckSameFile(Stat(makedev(8, 1), 99, 100, 1700000000), id, "/d/log (fd 1 of pid 7)");
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(Message(other), HasSubstr("/d/log (fd 1 of pid 7)"));
  EXPECT_THAT(Message(other), HasSubstr("inode is 99 here and was 1234 then"));
  absl::Status moved = CheckSameFile(Stat(makedev(0, 44), 1234, 150, 1700000000), id, "f");
  ASSERT_FALSE(moved.ok());
  EXPECT_THAT(Message(moved), HasSubstr("on device 0:44 (it was 8:1 there"));
  EXPECT_THAT(Message(moved), HasSubstr("size (150, was 100)"));
  absl::Status modified = CheckSameFile(Stat(makedev(8, 1), 1234, 150, 1700000000), id, "f", /*content_too=*/true);
  ASSERT_FALSE(modified.ok());
  EXPECT_THAT(Message(modified), HasSubstr("modified since the checkpoint (size 150, was 100"));
}

}  // namespace
}  // namespace cairn::restore
