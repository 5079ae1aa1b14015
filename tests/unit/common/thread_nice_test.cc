#include "common/thread_nice.h"

#include <sched.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace cairn {
namespace {

int OwnNice() { return ::getpriority(PRIO_PROCESS, 0); }

TEST(ThreadNiceTest, UrgentWhileHeldPassedOnOnlyWhenTakenThenBack) {
  const int before = OwnNice();
  {
    ThreadNice urgent(ThreadNice::kUrgent);
    if (OwnNice() != ThreadNice::kUrgent) GTEST_SKIP() << "this process may not raise its priority (no CAP_SYS_NICE)";
    // A thread started meanwhile (a library's, living on) starts at the normal priority; a
    // helper takes it explicitly, and the one after it again starts normal.
    int started = 99, helper = 99, after = 99;
    std::thread([&] { started = OwnNice(); }).join();
    const int nice = ThreadNice::Current();
    std::thread([&] {
      ThreadNice same(nice);
      helper = OwnNice();
      std::thread([&] { after = OwnNice(); }).join();
    }).join();
    EXPECT_EQ(started, before);
    EXPECT_EQ(helper, ThreadNice::kUrgent);
    EXPECT_EQ(after, before);
    {
      ThreadNice background(ThreadNice::kBackground);
      EXPECT_EQ(OwnNice(), ThreadNice::kBackground);
      background.End();
      EXPECT_EQ(OwnNice(), ThreadNice::kUrgent);
      background.End();  // once only
      EXPECT_EQ(OwnNice(), ThreadNice::kUrgent);
    }
    urgent.End();
    EXPECT_EQ(OwnNice(), before);
  }
  EXPECT_EQ(OwnNice(), before);
}

TEST(ThreadNiceTest, BackgroundIsPassedOnAndUrgentGoesBackToItsOwnPolicy) {
  const int before = OwnNice();
  {
    ThreadNice background(ThreadNice::kBackground);
    int started = 99;
    std::thread([&] { started = OwnNice(); }).join();
    EXPECT_EQ(started, ThreadNice::kBackground);
  }
  {
    ThreadNice urgent(ThreadNice::kUrgent);
    if (OwnNice() != ThreadNice::kUrgent) GTEST_SKIP() << "this process may not raise its priority (no CAP_SYS_NICE)";
  }
  // Its threads pass on their priority again once it is back.
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
  ThreadNice background(ThreadNice::kBackground);
  int started = 99;
  std::thread([&] { started = OwnNice(); }).join();
  EXPECT_EQ(started, ThreadNice::kBackground);
  background.End();
  EXPECT_EQ(OwnNice(), before);
}

TEST(ThreadNiceTest, OtherThreadsKeepTheirOwn) {
  const int before = OwnNice();
  int seen = 99;
  std::thread running([&] {
    // Started before: stays as it was whatever the other thread does meanwhile.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    seen = OwnNice();
  });
  {
    ThreadNice background(ThreadNice::kBackground);
    running.join();
  }
  EXPECT_EQ(seen, before);
  EXPECT_EQ(OwnNice(), before);
}

}  // namespace
}  // namespace cairn
