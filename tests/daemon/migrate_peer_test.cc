// The destination of `cairn job migrate`: configured peers (--peer NAME=HOST:PORT) and
// HOST:PORT given directly (src/daemon/migrate.h).

#include <gtest/gtest.h>

#include "daemon/migrate.h"

namespace cairn::daemon {
namespace {

TEST(MigratePeer, ParsesPeersAndRefusesMalformedOnes) {
  std::map<std::string, std::string> peers;
  EXPECT_TRUE(AddPeer("node-b=10.0.0.2:7000", &peers).ok());
  EXPECT_EQ(peers["node-b"], "10.0.0.2:7000");
  for (const char* bad : {"node-b", "=10.0.0.2:7000", "node-b=10.0.0.2", "bad/name=h:1"}) {
    absl::Status s = AddPeer(bad, &peers);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad << ": " << s;
    EXPECT_NE(s.message().find("--peer"), absl::string_view::npos) << s;
  }
  EXPECT_EQ(peers.size(), 1u);
}

TEST(MigratePeer, ResolvesNamesAddressesAndSaysWhatIsKnown) {
  std::map<std::string, std::string> peers = {{"node-b", "10.0.0.2:7000"}, {"node-c", "10.0.0.3:7000"}};
  auto b = ResolvePeer("node-b", peers, "node-a");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->address, "10.0.0.2:7000");
  EXPECT_EQ(b->node, "node-b");
  auto direct = ResolvePeer("127.0.0.1:9", peers, "node-a");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct->address, "127.0.0.1:9");
  EXPECT_EQ(direct->node, "");  // learnt from the daemon there

  auto unknown = ResolvePeer("node-z", peers, "node-a");
  EXPECT_TRUE(absl::IsNotFound(unknown.status()));
  EXPECT_NE(unknown.status().message().find("peers: node-b, node-c"), absl::string_view::npos) << unknown.status();
  EXPECT_NE(unknown.status().message().find("--peer node-z=HOST:PORT"), absl::string_view::npos) << unknown.status();
  EXPECT_NE(ResolvePeer("node-z", {}, "node-a").status().message().find("it has none"), absl::string_view::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(ResolvePeer("node-a", peers, "node-a").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ResolvePeer("", peers, "node-a").status()));
}

}  // namespace
}  // namespace cairn::daemon
