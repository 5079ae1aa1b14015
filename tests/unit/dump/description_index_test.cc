// Which descriptors share an open file description: one file opened many times and each open
// dup'd, in this process and in a forked child, against kcmp's answers; and the number of kcmp
// calls, which must grow as n log n (it was n²: 22 s for 9,000 opens of one file).

#include "engine/dump/description_index.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::dump {
namespace {

std::string TempFile() {
  char path[] = "/tmp/cairn-description-index-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd >= 0) ::close(fd);
  return path;
}

TEST(DescriptionIndexTest, EveryDupFindsItsOwnOpenAmongManyOpensOfOneFile) {
  std::string path = TempFile();
  constexpr int kOpens = 400;
  std::vector<int> opens, dups;
  for (int i = 0; i < kOpens; ++i) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    opens.push_back(fd);
  }
  // Dups in another order than the opens, so that neither is simply the last one seen.
  for (int i = kOpens - 1; i >= 0; --i) dups.push_back(::fcntl(opens[i], F_DUPFD_CLOEXEC, 0));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  DescriptionIndex index;
  for (int fd : opens) EXPECT_EQ(index.FindOrAdd(st.st_ino, ::getpid(), fd), nullptr) << "fd " << fd;
  for (int i = 0; i < kOpens; ++i) {
    const DescriptionIndex::Holder* h = index.FindOrAdd(st.st_ino, ::getpid(), dups[i]);
    ASSERT_NE(h, nullptr) << "fd " << dups[i] << " is a dup of fd " << opens[kOpens - 1 - i];
    EXPECT_EQ(h->fd, opens[kOpens - 1 - i]);
  }
  // Each lookup: a binary search, one check, at most two for the insertion.
  double bound = 2.0 * kOpens * (std::log2(kOpens) + 4);
  EXPECT_LE(static_cast<double>(index.comparisons()), bound) << "kcmp calls grow faster than n log n";
  for (int fd : opens) ::close(fd);
  for (int fd : dups) ::close(fd);
  ::unlink(path.c_str());
}

TEST(DescriptionIndexTest, AForkedChildsInheritedDescriptorIsItsParentsAndItsOwnOpenIsNot) {
  std::string path = TempFile();
  int inherited = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(inherited, 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    int own = ::open(path.c_str(), O_RDONLY);
    if (own != inherited + 10) ::dup2(own, inherited + 10);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  DescriptionIndex index;
  EXPECT_EQ(index.FindOrAdd(st.st_ino, ::getpid(), inherited), nullptr);
  const DescriptionIndex::Holder* h = index.FindOrAdd(st.st_ino, child, inherited);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->pid, ::getpid());
  EXPECT_EQ(index.FindOrAdd(st.st_ino, child, inherited + 10), nullptr) << "a separate open is its own description";
  // Another inode is never compared with this one's descriptions.
  uint64_t before = index.comparisons();
  EXPECT_EQ(index.FindOrAdd(st.st_ino + 1, ::getpid(), inherited), nullptr);
  EXPECT_EQ(index.comparisons(), before);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(inherited);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace cairn::dump
