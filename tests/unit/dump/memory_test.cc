#include "engine/dump/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <vector>

#include "engine/image/image.h"
#include "engine/proc/maps.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace cairn::dump {
namespace {

constexpr uint64_t kPage = 4096;

// This test's own memory, dumped with DumpPages: an area where every other page is written
// (thousands of one-page runs, as the last round of a pre-copy leaves them), some pages are
// written with zeros, and a few longer runs. A copy buffer packs many runs; the image must
// hold exactly the written, non-zero pages, each with its own content, in address order.
class DumpPagesTest : public ::testing::TestWithParam<image::PageBlock::Codec> {
 protected:
  static constexpr uint64_t kPages = 6144;  // 24 MiB: more than one buffer of either size

  void SetUp() override {
    area_ = static_cast<char*>(::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area_, MAP_FAILED);
    // No huge pages: the untouched pages between the written ones must stay missing.
    ASSERT_EQ(::madvise(area_, kPages * kPage, MADV_NOHUGEPAGE), 0);
    for (uint64_t i = 0; i < kPages; ++i) {
      bool odd_run = i % 2 == 0;              // every other page...
      bool long_run = i >= 5000 && i < 5300;  // ...and one long run
      if (!odd_run && !long_run) continue;
      if (i % 97 == 0) {
        std::memset(area_ + i * kPage, 0, kPage);  // present, but zero: not saved
        continue;
      }
      for (uint64_t w = 0; w < kPage / 8; w += 61) {
        uint64_t v = (i << 20) ^ w ^ 0x5a5a5a5a;
        std::memcpy(area_ + i * kPage + w * 8, &v, 8);
      }
      expected_.insert(i);
    }
  }
  void TearDown() override {
    if (area_ != nullptr && area_ != MAP_FAILED) ::munmap(area_, kPages * kPage);
  }

  uint64_t Start() const { return reinterpret_cast<uint64_t>(area_); }

  char* area_ = nullptr;
  std::set<uint64_t> expected_;  // page indexes that must be in the image
};

TEST_P(DumpPagesTest, ScatteredRunsAreSavedOnceEachWithTheirContent) {
  auto maps = proc::ReadSmaps(::getpid());
  ASSERT_TRUE(maps.ok()) << maps.status();
  std::vector<proc::MapEntry> mine;
  for (const proc::MapEntry& m : *maps) {
    if (m.start == Start() && m.end == Start() + kPages * kPage) mine.push_back(m);
  }
  ASSERT_EQ(mine.size(), 1u) << "the test's area is not one mapping";
  auto vmas = DescribeAreas(::getpid(), mine);
  ASSERT_TRUE(vmas.ok()) << vmas.status();
  ASSERT_EQ(vmas->size(), 1u);
  ASSERT_EQ((*vmas)[0].kind(), image::Vma::ANON);

  testing::TempDir dir;
  std::string ckpt = dir.Sub("ckpt");
  auto writer = image::ImageWriter::Create(ckpt);
  ASSERT_TRUE(writer.ok()) << writer.status();
  (*writer)->set_compression({GetParam(), 0});
  std::set<uint64_t> saved_shmem;
  auto stats = DumpPages(::getpid(), *vmas, **writer, nullptr, &saved_shmem);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pages, expected_.size());
  image::Checkpoint meta;
  *meta.mutable_process()->add_vmas() = (*vmas)[0];
  ASSERT_TRUE((*writer)->Commit(meta).ok());

  auto reader = image::ImageReader::Open(ckpt);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const image::Vma& v = (*reader)->meta().process().vmas(0);
  std::set<uint64_t> found;
  uint64_t last_end = 0;
  for (const image::PageBlock& b : v.blocks()) {
    ASSERT_FALSE(b.zero()) << "a full dump records no zero blocks";
    EXPECT_GE(b.vaddr(), last_end) << "blocks out of address order or overlapping at " << b.vaddr();
    last_end = b.vaddr() + b.length();
    std::vector<char> data(b.length());
    ASSERT_TRUE((*reader)->ReadBlock(b, data.data()).ok());
    for (uint64_t off = 0; off < b.length(); off += kPage) {
      uint64_t page = (b.vaddr() + off - Start()) / kPage;
      EXPECT_TRUE(found.insert(page).second) << "page " << page << " saved twice";
      EXPECT_EQ(std::memcmp(data.data() + off, area_ + page * kPage, kPage), 0) << "page " << page << " differs";
    }
  }
  EXPECT_EQ(found, expected_);
}

INSTANTIATE_TEST_SUITE_P(Codecs, DumpPagesTest, ::testing::Values(image::PageBlock::NONE, image::PageBlock::LZ4),
                         [](const auto& info) { return info.param == image::PageBlock::NONE ? "Plain" : "Lz4"; });

}  // namespace
}  // namespace cairn::dump
