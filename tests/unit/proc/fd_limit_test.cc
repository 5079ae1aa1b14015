#include "engine/proc/fd_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace cairn::proc {
namespace {

// The size of this process's descriptor table, as the kernel reports it.
uint64_t TableSize() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t v = 0;
  while (in >> key) {
    if (key == "FDSize:" && in >> v) return v;
  }
  return 0;
}

TEST(ReserveOwnDescriptorsTest, GrowsTheTableAtOnceAndRaisesTheLimit) {
  const uint64_t before = TableSize();
  ASSERT_GT(before, 0u);
  const uint64_t count = before + 3000;
  if (DescriptorRoom() < 2 * before + 3000 + 64) GTEST_SKIP() << "this machine lets cairn hold too few descriptors";
  ASSERT_TRUE(ReserveOwnDescriptors(count, "the test").ok());
  // Room for `count` more than the highest descriptor (itself below the old table's size).
  EXPECT_GE(TableSize(), count);
  rlimit r{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_GE(r.rlim_cur, count);
}

TEST(ReserveOwnDescriptorsTest, MoreThanTheMachineAllowsIsRefusedNamingWhatAsked) {
  absl::Status s = ReserveOwnDescriptors(uint64_t{1} << 31, "the dump's copies of the sockets");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("the dump's copies of the sockets"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace cairn::proc
