#include "engine/proc/stat.h"

#include <grp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::proc {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Builds a /proc/PID/stat line: fields 3..52 default to 1000 + their field number, so a
// parser that reads the wrong column gets a visibly wrong value.
std::string StatLine(const std::string& pid_and_comm, std::map<int, std::string> overrides = {}) {
  std::string line = pid_and_comm;
  for (int field = 3; field <= 52; ++field) {
    auto it = overrides.find(field);
    std::string v = it != overrides.end() ? it->second : absl::StrCat(1000 + field);
    if (field == 3 && it == overrides.end()) v = "S";
    absl::StrAppend(&line, " ", v);
  }
  line += "\n";
  return line;
}

TEST(ParseStatTest, ReadsTheDocumentedColumns) {
  auto st = ParseStat(StatLine("4321 (worker)", {{4, "1"}, {5, "4300"}, {6, "4200"}, {9, "4194560"},
                                                 {20, "3"}, {26, "94000000000000"}}));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pid, 4321);
  EXPECT_EQ(st->comm, "worker");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 1);
  EXPECT_EQ(st->pgrp, 4300);
  EXPECT_EQ(st->session, 4200);
  EXPECT_EQ(st->flags, 4194560u);
  EXPECT_EQ(st->num_threads, 3);
  EXPECT_EQ(st->start_code, 94000000000000u);
  EXPECT_EQ(st->end_code, 1027u);
  EXPECT_EQ(st->start_stack, 1028u);
  EXPECT_EQ(st->start_data, 1045u);
  EXPECT_EQ(st->end_data, 1046u);
  EXPECT_EQ(st->start_brk, 1047u);
  EXPECT_EQ(st->arg_start, 1048u);
  EXPECT_EQ(st->arg_end, 1049u);
  EXPECT_EQ(st->env_start, 1050u);
  EXPECT_EQ(st->env_end, 1051u);
  EXPECT_FALSE(st->IsKernelThread());
}

TEST(ParseStatTest, CommWithSpacesAndParentheses) {
  auto st = ParseStat(StatLine("123 (a) b)", {{3, "R"}, {4, "77"}}));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pid, 123);
  EXPECT_EQ(st->comm, "a) b");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->ppid, 77);

  auto st2 = ParseStat(StatLine("9 ((x (y) ) z)", {{4, "8"}}));
  ASSERT_TRUE(st2.ok()) << st2.status();
  EXPECT_EQ(st2->comm, "(x (y) ) z");
  EXPECT_EQ(st2->ppid, 8);

  auto empty = ParseStat(StatLine("10 ()", {{4, "2"}}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->comm, "");
}

TEST(ParseStatTest, KernelThreadFlag) {
  auto st = ParseStat(StatLine("2 (kthreadd)", {{4, "0"}, {9, absl::StrCat(0x00208040)}}));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->IsKernelThread());
}

TEST(ParseStatTest, MalformedIsDataLoss) {
  std::string good = StatLine("5 (ok)");
  std::vector<std::string> bad = {
      "",
      "5 ok S 1 2 3",                                   // no parentheses
      "5 (ok S 1 2 3",                                  // no closing parenthesis
      "5 (ok) S 1 2 3 4 5\n",                           // too few fields
      StatLine("x5 (ok)"),                              // pid not numeric
      StatLine("5 (ok)", {{4, "one"}}),                 // ppid not numeric
      StatLine("5 (ok)", {{26, "0xzz"}}),               // start_code not numeric
      good.substr(0, good.size() / 2),                  // cut short
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    auto st = ParseStat(text);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(ReadStatTest, Self) {
  auto st = ReadStat(::getpid());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->pid, ::getpid());
  EXPECT_EQ(st->ppid, ::getppid());
  EXPECT_EQ(st->pgrp, ::getpgrp());
  EXPECT_EQ(st->session, ::getsid(0));
  EXPECT_EQ(st->state, 'R');
  EXPECT_GE(st->num_threads, 1);
  EXPECT_FALSE(st->IsKernelThread());
  const auto fn = reinterpret_cast<uint64_t>(&ParseStat);
  EXPECT_LE(st->start_code, fn);
  EXPECT_LT(fn, st->end_code);
  EXPECT_LT(st->arg_start, st->arg_end);
}

TEST(ReadStatTest, MissingProcessIsNotFound) {
  EXPECT_EQ(ReadStat(INT_MAX).status().code(), absl::StatusCode::kNotFound);
}

constexpr char kStatus[] =
    "Name:\tcat\n"
    "Umask:\t0022\n"
    "State:\tR (running)\n"
    "Tgid:\t1234\n"
    "Uid:\t1000\t1001\t1002\t1003\n"
    "Gid:\t2000\t2001\t2002\t2003\n"
    "FDSize:\t64\n"
    "Groups:\t4 24 27 \n"
    "SigIgn:\t0000000000001000\n"
    "SigCgt:\t0000000180004002\n"
    "NStgid:\t1234\n"
    "CapInh:\t0000000000000000\n"
    "CapPrm:\t000001ffffffffff\n"
    "CapEff:\t0000000000003000\n"
    "CapBnd:\t000001fffeffffff\n"
    "CapAmb:\t0000000000000400\n"
    "NoNewPrivs:\t1\n"
    "Seccomp:\t2\n"
    "Seccomp_filters:\t1\n"
    "Cpus_allowed_list:\t0-15\n";

TEST(ParseStatusTest, CredentialsAndSecurityState) {
  auto st = ParseStatus(kStatus);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_THAT(st->uid, ElementsAre(1000u, 1001u, 1002u, 1003u));
  EXPECT_THAT(st->gid, ElementsAre(2000u, 2001u, 2002u, 2003u));
  EXPECT_THAT(st->groups, ElementsAre(4u, 24u, 27u));
  EXPECT_EQ(st->cap_inh, 0u);
  EXPECT_EQ(st->cap_prm, 0x1ffffffffffu);
  EXPECT_EQ(st->cap_eff, 0x3000u);
  EXPECT_EQ(st->cap_bnd, 0x1fffeffffffu);
  EXPECT_EQ(st->cap_amb, 0x400u);
  EXPECT_TRUE(st->no_new_privs);
  EXPECT_EQ(st->seccomp, 2);
  EXPECT_EQ(st->umask, 022);
  EXPECT_EQ(st->sig_ignored, 0x1000u);
  EXPECT_EQ(st->sig_caught, 0x180004002u);
}

TEST(ParseStatusTest, NoGroupsAndDefaults) {
  auto st = ParseStatus("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\nNoNewPrivs:\t0\nSeccomp:\t0\n");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_THAT(st->groups, IsEmpty());
  EXPECT_FALSE(st->no_new_privs);
  EXPECT_EQ(st->seccomp, 0);
  EXPECT_EQ(st->cap_eff, 0u);
  EXPECT_EQ(st->umask, -1) << "no Umask line: unknown";
}

TEST(ParseStatusTest, MalformedIsDataLoss) {
  for (const char* text : {"Uid:\t1\t2\t3\n", "Uid:\t1\t2\t3\t4\t5\n", "Gid:\ta\tb\tc\td\n",
                           "Groups:\t4 x\n", "CapEff:\tzz\n", "Seccomp:\tstrict\n",
                           "Umask:\t0089\n", "Umask:\t\n"}) {
    SCOPED_TRACE(text);
    auto st = ParseStatus(text);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(ReadStatusTest, SelfMatchesSyscalls) {
  auto st = ReadStatus(::getpid());
  ASSERT_TRUE(st.ok()) << st.status();
  uid_t r, e, s;
  gid_t gr, ge, gs;
  ASSERT_EQ(::getresuid(&r, &e, &s), 0);
  ASSERT_EQ(::getresgid(&gr, &ge, &gs), 0);
  EXPECT_THAT(st->uid, ElementsAre(r, e, s, e));  // fsuid follows euid unless changed
  EXPECT_THAT(st->gid, ElementsAre(gr, ge, gs, ge));
  std::vector<gid_t> groups(static_cast<size_t>(::getgroups(0, nullptr)));
  ASSERT_EQ(::getgroups(static_cast<int>(groups.size()), groups.data()), static_cast<int>(groups.size()));
  std::vector<uint32_t> want(groups.begin(), groups.end());
  std::vector<uint32_t> got = st->groups;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  mode_t mask = ::umask(022);
  ::umask(mask);
  EXPECT_EQ(st->umask, static_cast<int>(mask));
}

TEST(ListTasksTest, SeesEveryThread) {
  auto before = ListTasks(::getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_THAT(*before, Contains(::getpid()));

  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<pid_t> tids;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      std::unique_lock<std::mutex> lock(mu);
      tids.push_back(static_cast<pid_t>(::syscall(SYS_gettid)));
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tids.size() == 3; });
  }
  auto during = ListTasks(::getpid());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();

  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(before->size(), 1u) << "the test process should be single-threaded here";
  EXPECT_EQ(during->size(), before->size() + 3);
  EXPECT_TRUE(std::is_sorted(during->begin(), during->end()));
  EXPECT_THAT(*during, Contains(::getpid()));
  for (pid_t tid : tids) EXPECT_THAT(*during, Contains(tid));
}

TEST(LimitsTest, ParsesNumbersAndUnlimitedInResourceOrder) {
  auto l = ParseLimits(
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max cpu time              unlimited            unlimited            seconds   \n"
      "Max stack size            8388608              unlimited            bytes     \n"
      "Max open files            1024                 524288               files     \n");
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0].cur, ~0ULL);
  EXPECT_EQ((*l)[1].cur, 8388608u);
  EXPECT_EQ((*l)[1].max, ~0ULL);
  EXPECT_EQ((*l)[2].cur, 1024u);
  EXPECT_EQ((*l)[2].max, 524288u);
}

TEST(LimitsTest, GarbageIsDataLoss) {
  EXPECT_EQ(ParseLimits("Limit Soft Hard Units\nMax cpu time              lots                 unlimited\n").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(LimitsTest, OwnLimitsMatchGetrlimit) {
  auto l = ReadLimits(::getpid());
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_GE(l->size(), static_cast<size_t>(RLIMIT_NLIMITS));
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  EXPECT_EQ((*l)[RLIMIT_NOFILE].cur, nofile.rlim_cur);
  EXPECT_EQ((*l)[RLIMIT_NOFILE].max, nofile.rlim_max);
}

TEST(ListTasksTest, MissingProcessIsNotFound) {
  EXPECT_EQ(ListTasks(INT_MAX).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cairn::proc
