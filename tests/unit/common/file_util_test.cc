#include "common/file_util.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace cairn {
namespace {

using Ranges = std::vector<std::pair<unsigned, unsigned>>;

TEST(RangesAroundTest, CoverEveryNumberButTheKeptOnes) {
  EXPECT_EQ(RangesAround({}, 3), (Ranges{{3, ~0U}}));
  // Unsorted, repeated, negative and below `from`: all taken as they mean.
  EXPECT_EQ(RangesAround({9, 5, 6, -1, 1, 9}, 3), (Ranges{{3, 4}, {7, 8}, {10, ~0U}}));
  EXPECT_EQ(RangesAround({0, 1, 2}, 0), (Ranges{{3, ~0U}}));
  EXPECT_EQ(RangesAround({4}, 0), (Ranges{{0, 3}, {5, ~0U}}));
}

}  // namespace
}  // namespace cairn
