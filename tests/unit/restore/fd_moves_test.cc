// The plan that puts a restored process's descriptors in place from masters at any numbers:
// run on a model of a descriptor table, it must leave exactly the wanted descriptions at the
// wanted numbers with the wanted close-on-exec flags, nothing else, and never touch a pinned
// number — for masters placed where descriptors must go (cycles among them included), several
// descriptors of one master, and random tables.

#include "engine/restore/fd_moves.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace cairn::restore {
namespace {

struct Entry {
  int description;
  bool cloexec;
};

// Runs `calls` on `table` (number -> entry); false on a call the kernel would refuse.
bool Run(const std::vector<FdCall>& calls, std::map<int, Entry>* table, const std::set<int>& pinned, int limit,
         std::string* why) {
  for (const FdCall& c : calls) {
    if (pinned.count(c.to) != 0 || c.to >= limit) {
      *why = "touched " + std::to_string(c.to);
      return false;
    }
    switch (c.kind) {
      case FdCall::kDup3:
        if (table->count(c.from) == 0 || c.from == c.to) {
          *why = "dup3 from " + std::to_string(c.from);
          return false;
        }
        (*table)[c.to] = {(*table)[c.from].description, c.cloexec};
        break;
      case FdCall::kClearCloexec:
        if (table->count(c.to) == 0) return false;
        (*table)[c.to].cloexec = false;
        break;
      case FdCall::kClose:
        if (table->erase(c.to) == 0) {
          *why = "close of a free " + std::to_string(c.to);
          return false;
        }
        break;
    }
  }
  return true;
}

void Check(const std::set<int>& masters, const std::vector<FdTarget>& targets, const std::set<int>& pinned,
           int limit) {
  std::map<int, Entry> table;
  for (int m : masters) table[m] = {m, true};  // a master's description is named by its number
  for (int p : pinned) table[p] = {-p, true};
  auto calls = PlanFdCalls(masters, targets, pinned, limit);
  ASSERT_TRUE(calls.ok()) << calls.status();
  std::string why;
  ASSERT_TRUE(Run(*calls, &table, pinned, limit, &why)) << why;
  std::map<int, Entry> want;
  for (const FdTarget& t : targets) want[t.fd] = {t.master, t.cloexec};
  for (int p : pinned) want[p] = {-p, true};
  ASSERT_EQ(table.size(), want.size());
  for (const auto& [n, e] : want) {
    ASSERT_EQ(table.count(n), 1u) << "fd " << n << " missing";
    EXPECT_EQ(table[n].description, e.description) << "fd " << n;
    EXPECT_EQ(table[n].cloexec, e.cloexec) << "fd " << n;
  }
}

TEST(FdMovesTest, MastersWhereDescriptorsGoIncludingCyclesEndInPlace) {
  // 3 wants master 4, 4 wants 5, 5 wants 3: a cycle; 6 is master 3's second descriptor; 7 is
  // master 7's own place without close-on-exec; master 8 is used by no one.
  Check({3, 4, 5, 7, 8}, {{3, 4, true}, {4, 5, false}, {5, 3, true}, {6, 3, false}, {7, 7, false}}, {}, 100);
}

TEST(FdMovesTest, TheOldLayoutMastersAboveEveryNumberStillWorks) {
  Check({100, 101, 102}, {{0, 100, false}, {1, 101, false}, {2, 101, false}, {9, 102, true}}, {200}, 1000);
}

TEST(FdMovesTest, RandomTablesEndExactlyAsWanted) {
  std::mt19937 rng(20261206);
  for (int round = 0; round < 300; ++round) {
    int n = 1 + static_cast<int>(rng() % 60);
    std::set<int> masters;
    while (static_cast<int>(masters.size()) < n) masters.insert(3 + static_cast<int>(rng() % 90));
    std::vector<int> ms(masters.begin(), masters.end());
    std::set<int> used;
    std::vector<FdTarget> targets;
    int k = static_cast<int>(rng() % 90);
    for (int i = 0; i < k; ++i) {
      int fd = static_cast<int>(rng() % 95);
      if (!used.insert(fd).second) continue;
      targets.push_back({fd, ms[rng() % ms.size()], (rng() & 1) != 0});
    }
    // Pinned: two numbers among the masters' that no target nor master holds (the masters of
    // files made again, InstallFds), where a temporary would otherwise go; and two above.
    std::set<int> pinned = {120, 121};
    for (int p = 3, added = 0; p < 95 && added < 2; ++p) {
      if (!masters.count(p) && !used.count(p) && rng() % 4 == 0) {
        pinned.insert(p);
        ++added;
      }
    }
    Check(masters, targets, pinned, 200);
    if (HasFailure()) {
      ADD_FAILURE() << "round " << round;
      return;
    }
  }
}

TEST(FdMovesTest, ACycleBreaksThroughANumberHoldingAMasterNoOneHereNeeds) {
  // Masters 5-9 belong to other processes of the tree; the limit leaves no number above them.
  Check({3, 4, 5, 6, 7, 8, 9}, {{3, 4, true}, {4, 3, false}}, {}, 10);
}

TEST(FdMovesTest, ACycleBreaksThroughAFreeNumberThatIsNotPinned) {
  // 5 is free but pinned (a master of a file made again): the cycle must go through 6.
  Check({3, 4}, {{3, 4, true}, {4, 3, false}}, {5}, 7);
}

TEST(FdMovesTest, APinnedNumberIsNoFreeNumberForACycle) {
  auto calls = PlanFdCalls({3, 4}, {{3, 4, true}, {4, 3, true}}, {5, 6}, 7);
  ASSERT_FALSE(calls.ok());
  EXPECT_EQ(calls.status().code(), absl::StatusCode::kResourceExhausted) << calls.status();
}

TEST(FdMovesTest, NoFreeNumberForACycleIsAClearError) {
  // Every number below the limit is taken by a master still needed: a cycle cannot be broken.
  auto calls = PlanFdCalls({3, 4}, {{3, 4, true}, {4, 3, true}}, {}, 5);
  ASSERT_FALSE(calls.ok());
  EXPECT_NE(calls.status().message().find("no descriptor number below 5"), std::string::npos);
}

}  // namespace
}  // namespace cairn::restore
