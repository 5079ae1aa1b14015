#include "engine/proc/mountinfo.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "gtest/gtest.h"

namespace cairn::proc {
namespace {

TEST(MountPointOf, TheRootFileSystemIsMountedAtTheRoot) {
  struct stat st {};
  ASSERT_EQ(::stat("/", &st), 0);
  auto m = MountPointOf(::getpid(), st.st_dev);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "/");
}

TEST(MountPointOf, ProcIsFoundByItsDevice) {
  struct stat st {};
  ASSERT_EQ(::stat("/proc/self", &st), 0);
  auto m = MountPointOf(::getpid(), st.st_dev);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "/proc");
}

// mountinfo escapes a space as \040: the path given back is the real one, which opens. In a
// child with a mount namespace of its own, so that the test's mount touches nothing else.
TEST(MountPointOf, AMountPointWithASpaceComesBackUnescaped) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount";
  char tmpl[] = "/tmp/cairn-mnt-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/a b";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(2);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) _exit(3);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) _exit(4);
    auto m = MountPointOf(::getpid(), st.st_dev);
    _exit(m.ok() && *m == dir ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::filesystem::remove_all(tmpl);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "no mount namespace of our own";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the mount point at '" << dir << "' was not found as it is (1), or the "
                                    << "setup failed (3, 4)";
}

TEST(MountPointOf, AnUnknownDeviceIsNotFound) {
  auto m = MountPointOf(::getpid(), makedev(4095, 4095));
  EXPECT_TRUE(absl::IsNotFound(m.status())) << m.status();
}

TEST(ReadMountTable, HoldsTheRootAndProcWithTheirTypes) {
  auto table = ReadMountTable(::getpid());
  ASSERT_TRUE(table.ok()) << table.status();
  bool root = false, proc = false;
  for (const MountEntry& m : *table) {
    root = root || m.point == "/";
    if (m.point == "/proc") {
      proc = true;
      EXPECT_EQ(m.fstype, "proc");
      struct stat st {};
      ASSERT_EQ(::stat("/proc/self", &st), 0);
      EXPECT_EQ(m.dev, st.st_dev);
      EXPECT_NE(m.parent_id, 0u);
    }
  }
  EXPECT_TRUE(root);
  EXPECT_TRUE(proc);
}

}  // namespace
}  // namespace cairn::proc
