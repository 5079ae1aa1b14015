#include "engine/dump/tracker.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace cairn::dump {
namespace {

constexpr size_t kPage = 4096;

proc::FdInfo Uffd(const std::string& api) {
  proc::FdInfo info;
  info.target = "anon_inode:[userfaultfd]";
  info.extra = {{"pending", "0"}, {"total", "0"}, {"API", api}};
  return info;
}

TEST(IsTrackerFdTest, UserfaultfdWithWpAsyncOnly) {
  EXPECT_TRUE(IsTrackerFd(Uffd("aa:8000:1c0000000000000")));
  EXPECT_TRUE(IsTrackerFd(Uffd("aa:1ffff:1c0000000000000")));
  EXPECT_FALSE(IsTrackerFd(Uffd("aa:0:1c0000000000000")));  // restore's fill uffd, a program's own
  EXPECT_FALSE(IsTrackerFd(Uffd("garbage")));
  proc::FdInfo other = Uffd("aa:8000:0");
  other.target = "anon_inode:[eventfd]";
  EXPECT_FALSE(IsTrackerFd(other));
}

// A tracker on this test's own memory: written and discarded pages are found once, and the
// scan protects them again.
class ScanWrittenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    uffd_.Reset(static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK)));
    ASSERT_TRUE(uffd_.valid()) << std::strerror(errno);
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = kUffdFeatureWpAsync;
    if (::ioctl(uffd_.get(), UFFDIO_API, &api) != 0) GTEST_SKIP() << "no UFFD_FEATURE_WP_ASYNC on this kernel";
    area_ = static_cast<char*>(::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area_, MAP_FAILED);
    std::memset(area_, 1, kPages * kPage);
    auto t = Tracker::Take(::getpid(), uffd_.get());
    ASSERT_TRUE(t.ok()) << t.status();
    tracker_.emplace(std::move(*t));
    ASSERT_TRUE(tracker_->Register(Start(), End()));
    ASSERT_TRUE(tracker_->Protect(Start(), End()).ok());
    pagemap_.Reset(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(pagemap_.valid());
  }
  void TearDown() override {
    if (area_ != nullptr && area_ != MAP_FAILED) ::munmap(area_, kPages * kPage);
  }
  uint64_t Start() const { return reinterpret_cast<uint64_t>(area_); }
  uint64_t End() const { return Start() + kPages * kPage; }
  uint64_t Page(size_t i) const { return Start() + i * kPage; }

  static constexpr size_t kPages = 1024;
  UniqueFd uffd_, pagemap_;
  char* area_ = nullptr;
  std::optional<Tracker> tracker_;
};

TEST_F(ScanWrittenTest, FindsWrittenAndDiscardedPagesOnce) {
  std::vector<WrittenRun> none;
  ASSERT_TRUE(ScanWritten(pagemap_.get(), Start(), End(), &none).ok());
  EXPECT_TRUE(none.empty()) << none.size() << " runs right after protecting";

  area_[3 * kPage] = 7;
  area_[4 * kPage + 100] = 7;
  area_[900 * kPage] = 7;
  ASSERT_EQ(::madvise(area_ + 500 * kPage, 2 * kPage, MADV_DONTNEED), 0);
  std::vector<WrittenRun> runs;
  ASSERT_TRUE(ScanWritten(pagemap_.get(), Start(), End(), &runs).ok());
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].start, Page(3));
  EXPECT_EQ(runs[0].len, 2 * kPage);
  EXPECT_TRUE(runs[0].present);
  EXPECT_EQ(runs[1].start, Page(500));
  EXPECT_EQ(runs[1].len, 2 * kPage);
  EXPECT_FALSE(runs[1].present) << "a discarded page holds no data";
  EXPECT_EQ(runs[2].start, Page(900));
  EXPECT_TRUE(runs[2].present);

  std::vector<WrittenRun> again;
  ASSERT_TRUE(ScanWritten(pagemap_.get(), Start(), End(), &again).ok());
  EXPECT_TRUE(again.empty()) << "the scan must protect what it found";
}

TEST_F(ScanWrittenTest, ParallelScanAgreesAcrossChunks) {
  for (size_t i = 0; i < kPages; i += 37) area_[i * kPage] = 9;
  std::vector<std::vector<WrittenRun>> out;
  // Two ranges, the second cut in the middle of the area.
  ASSERT_TRUE(ScanWrittenParallel(pagemap_.get(), {{Start(), Page(512)}, {Page(512), End()}}, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  size_t found = 0;
  for (const auto& v : out) {
    for (const WrittenRun& r : v) {
      EXPECT_TRUE(r.present);
      found += r.len / kPage;
    }
  }
  EXPECT_EQ(found, (kPages + 36) / 37);
}

}  // namespace
}  // namespace cairn::dump
