// Which seccomp filters hand system calls to a supervisor (dump/seccomp.h): those a checkpoint
// must refuse, as the supervisor and its listener are outside it.
#include "engine/dump/seccomp.h"

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cairn::dump {
namespace {

std::string Program(std::vector<sock_filter> insns) {
  return std::string(reinterpret_cast<const char*>(insns.data()), insns.size() * sizeof(sock_filter));
}

TEST(NotifiesSupervisor, AFilterThatAllowsOrFailsCallsDoesNot) {
  EXPECT_FALSE(NotifiesSupervisor(Program({
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 39, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  })));
}

TEST(NotifiesSupervisor, AReturnOfUserNotificationDoes) {
  EXPECT_TRUE(NotifiesSupervisor(Program({
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 39, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  })));
}

TEST(NotifiesSupervisor, AReturnOfTheAccumulatorMightAndCounts) {
  EXPECT_TRUE(NotifiesSupervisor(Program({
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
      BPF_STMT(BPF_RET | BPF_A, 0),
  })));
}

}  // namespace
}  // namespace cairn::dump
