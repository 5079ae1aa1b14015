// The controller's stores against the real thing: a SQLite file, and a 3-member etcd cluster on
// loopback. Same contract for both; leadership and write fencing on etcd.

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "controller/store/store.h"
#include "controller_harness.h"

namespace cairn::testing {
namespace {

using controller::OpenStore;
using controller::Store;

// What every store must do: get, put, overwrite, list by prefix in key order, delete.
void CheckKeyValueContract(Store& s) {
  auto none = s.Get("jobs/none");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(s.Put("jobs/b", std::string("B\0b", 3)).ok());  // values are bytes
  ASSERT_TRUE(s.Put("jobs/a", "A").ok());
  ASSERT_TRUE(s.Put("jobsx", "not under jobs/").ok());
  ASSERT_TRUE(s.Put("nodes/n", "N").ok());
  ASSERT_TRUE(s.Put("jobs/a", "A2").ok());
  auto got = s.Get("jobs/b");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, std::string("B\0b", 3));
  auto list = s.List("jobs/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].first, "jobs/a");
  EXPECT_EQ((*list)[0].second, "A2");
  EXPECT_EQ((*list)[1].first, "jobs/b");
  ASSERT_TRUE(s.Delete("jobs/a").ok());
  ASSERT_TRUE(s.Delete("jobs/never").ok());
  list = s.List("jobs/");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
}

TEST(SqliteStoreTest, KeyValueContractAndOneControllerPerFile) {
  TempDir dir;
  auto s = OpenStore("sqlite:" + dir / "db", 5);
  ASSERT_TRUE(s.ok()) << s.status();
  auto l = (*s)->Campaign("me");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->leader);
  CheckKeyValueContract(**s);
  auto second = OpenStore(dir / "db", 5);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  s->reset();
  auto reopened = OpenStore(dir / "db", 5);  // the lock goes with the first store
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto got = (*reopened)->Get("nodes/n");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, "N");
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdCluster::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd): `apt-get install etcd-server etcd-client`, "
                      "or run scripts/install-deps.sh";
    }
    etcd_ = std::make_unique<EtcdCluster>(dir_.path());
    ASSERT_TRUE(etcd_->Start());
  }
  TempDir dir_;
  std::unique_ptr<EtcdCluster> etcd_;
};

TEST_F(EtcdStoreTest, KeyValueContractLeadershipAndFencing) {
  auto a = OpenStore(etcd_->StoreSpec(), 2);
  auto b = OpenStore(etcd_->StoreSpec(), 2);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // Nobody leads yet: writes are refused.
  EXPECT_EQ((*a)->Put("jobs/x", "x").code(), absl::StatusCode::kFailedPrecondition);

  auto la = (*a)->Campaign("ctl-a");
  ASSERT_TRUE(la.ok()) << la.status();
  ASSERT_TRUE(la->leader);
  auto lb = (*b)->Campaign("ctl-b");
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_FALSE(lb->leader);
  EXPECT_EQ(lb->leader_id, "ctl-a");
  CheckKeyValueContract(**a);
  absl::Status follower_put = (*b)->Put("jobs/y", "y");
  EXPECT_EQ(follower_put.code(), absl::StatusCode::kFailedPrecondition) << follower_put;
  auto y = (*a)->Get("jobs/y");
  ASSERT_TRUE(y.ok());
  EXPECT_FALSE(y->has_value());  // nothing written by the follower

  // The leader stops renewing: its lease expires and the follower takes over; the old leader,
  // not knowing yet, cannot write (fenced by the leader key), and learns it lost.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  bool took = false;
  while (!took && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    lb = (*b)->Campaign("ctl-b");
    took = lb.ok() && lb->leader;
  }
  ASSERT_TRUE(took) << "follower never took the leadership";
  absl::Status stale = (*a)->Put("jobs/z", "z");
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_TRUE(absl::StrContains(stale.message(), "leadership lost")) << stale;
  EXPECT_TRUE((*b)->Put("jobs/z", "from b").ok());
  la = (*a)->Campaign("ctl-a");
  ASSERT_TRUE(la.ok());
  EXPECT_FALSE(la->leader);
  EXPECT_EQ(la->leader_id, "ctl-b");

  // Resigning hands over without waiting for the lease.
  (*b)->Resign();
  la = (*a)->Campaign("ctl-a");
  ASSERT_TRUE(la.ok());
  EXPECT_TRUE(la->leader);
  auto z = (*a)->Get("jobs/z");
  ASSERT_TRUE(z.ok() && z->has_value());
  EXPECT_EQ(**z, "from b");
}

TEST(EtcdStoreUnreachable, SaysWhereItTried) {
  int port = FreePort();
  auto s = OpenStore("etcd://127.0.0.1:" + std::to_string(port), 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(s.status().message(), std::to_string(port))) << s.status();
}

}  // namespace
}  // namespace cairn::testing
