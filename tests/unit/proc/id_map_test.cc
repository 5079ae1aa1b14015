// User namespace id maps (proc/id_map.h): parsed as the kernel prints them, written as it takes
// them, and ids looked up both ways at the edges of each range.

#include "engine/proc/id_map.h"

#include <gtest/gtest.h>

namespace cairn::proc {
namespace {

TEST(IdMap, ParsesTheKernelsColumnsAndFormatsThemBack) {
  auto map = ParseIdMap("         0     100000      65536\n     65536          0          1\n");
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->size(), 2u);
  EXPECT_EQ((*map)[0].inside, 0u);
  EXPECT_EQ((*map)[0].outside, 100000u);
  EXPECT_EQ((*map)[0].count, 65536u);
  EXPECT_EQ(FormatIdMap(*map), "0 100000 65536\n65536 0 1\n");
}

TEST(IdMap, RefusesWhatIsNotThreeNumbers) {
  EXPECT_FALSE(ParseIdMap("0 100000\n").ok());
  EXPECT_FALSE(ParseIdMap("0 x 1\n").ok());
  EXPECT_FALSE(ParseIdMap("0 1 0\n").ok()) << "an empty range";
  auto empty = ParseIdMap("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(IdMap, LooksIdsUpBothWaysAtTheEdgesOfEachRange) {
  std::vector<IdRange> map = {{0, 100000, 65536}, {70000, 5, 2}};
  EXPECT_EQ(InsideId(map, 100000), 0u);
  EXPECT_EQ(InsideId(map, 165535), 65535u);
  EXPECT_FALSE(InsideId(map, 165536).has_value());
  EXPECT_FALSE(InsideId(map, 99999).has_value());
  EXPECT_EQ(InsideId(map, 6), 70001u);
  EXPECT_FALSE(InsideId(map, 7).has_value());
  EXPECT_EQ(OutsideId(map, 0), 100000u);
  EXPECT_EQ(OutsideId(map, 70001), 6u);
  EXPECT_FALSE(OutsideId(map, 65536).has_value());
}

}  // namespace
}  // namespace cairn::proc
