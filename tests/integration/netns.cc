#include "netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "harness.h"

namespace cairn::testing {

void NetworkNodes::Remove() {
  for (const std::string& ns : ns_) Ip({"netns", "del", ns});
  ns_.clear();
  if (!bridge_.empty()) Ip({"link", "del", bridge_});
  bridge_.clear();
  for (const std::string& b : more_bridges_) Ip({"link", "del", b});
  more_bridges_.clear();
}

::testing::AssertionResult NetworkNodes::AddWire(const std::string& device) {
  std::string bridge = "cbr" + tag_ + "w" + std::to_string(more_bridges_.size());
  if (!Ip({"link", "add", bridge, "type", "bridge"})) return ::testing::AssertionFailure() << last_;
  more_bridges_.push_back(bridge);
  if (!Ip({"link", "set", bridge, "up"})) return ::testing::AssertionFailure() << last_;
  for (size_t i = 0; i < ns_.size(); ++i) {
    std::string inside = "w" + std::to_string(i) + tag_ + "x" + std::to_string(more_bridges_.size()), outside = inside + "b";
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"link", "add", inside, "type", "veth", "peer", "name", outside},
             {"link", "set", inside, "netns", ns_[i]},
             {"link", "set", outside, "master", bridge},
             {"link", "set", outside, "up"},
             {"-n", ns_[i], "link", "set", inside, "name", device},
             {"-n", ns_[i], "link", "set", device, "up"}}) {
      if (!Ip(args)) return ::testing::AssertionFailure() << last_;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult NetworkNodes::Create(const std::vector<std::string>& nodes, const std::string& subnet,
                                                const std::string& scratch, const std::string& device) {
  subnet_ = subnet;
  scratch_ = scratch;
  // Unique in this process too: a namespace outlives its deletion while a socket of it lingers
  // (a closed connection in FIN_WAIT), and its devices with it.
  static int created = 0;
  std::string tag = std::to_string(::getpid() % 100000) + "x" + std::to_string(created++ % 100);
  tag_ = tag;
  bridge_ = "cbr" + tag;
  if (!Ip({"link", "add", bridge_, "type", "bridge"}) || !Ip({"link", "set", bridge_, "up"})) {
    bridge_.clear();
    return ::testing::AssertionFailure() << last_;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::string ns = "cairn" + nodes[i] + tag;
    if (!Ip({"netns", "add", ns})) return ::testing::AssertionFailure() << last_;
    ns_.push_back(ns);
    std::string inside = "v" + nodes[i] + tag, outside = inside + "b";
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"link", "add", inside, "type", "veth", "peer", "name", outside},
             {"link", "set", inside, "netns", ns},
             {"link", "set", outside, "master", bridge_},
             {"link", "set", outside, "up"}}) {
      if (!Ip(args)) return ::testing::AssertionFailure() << last_;
    }
    if (!device.empty()) {
      if (!Ip({"-n", ns, "link", "set", inside, "name", device})) return ::testing::AssertionFailure() << last_;
      inside = device;
    }
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"-n", ns, "addr", "add", Address(i) + "/24", "dev", inside},
             {"-n", ns, "link", "set", inside, "up"},
             {"-n", ns, "link", "set", "lo", "up"}}) {
      if (!Ip(args)) return ::testing::AssertionFailure() << last_;
    }
    dev_.push_back(inside);
  }
  return ::testing::AssertionSuccess();
}

bool NetworkNodes::JoinWire() { return Ip({"addr", "add", WireAddress() + "/24", "dev", bridge_}); }

bool NetworkNodes::Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/sbin/ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = RunCommand(argv, scratch_);
  last_ = r.Describe();
  return r.Exited(0);
}

bool NetworkNodes::HasAddress(size_t i, const std::string& addr) {
  std::vector<std::string> argv = {"/usr/sbin/ip", "-n", ns_[i], "-o", "addr", "show"};
  CommandResult r = RunCommand(argv, scratch_);
  last_ = r.Describe();
  return r.out.find(" " + addr + "/") != std::string::npos;
}

int NetworkNodes::ConnectFrom(size_t i, const std::string& addr, int port) const {
  int out = -1;
  std::string path = Path(i);
  std::thread t([&] {
    int nsfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) return;
    ::close(nsfd);
    for (int tries = 0; tries < 100 && out < 0; ++tries) {
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      ::inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
      a.sin_port = htons(static_cast<uint16_t>(port));
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        out = s;
      } else {
        ::close(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
  t.join();
  return out;
}

}  // namespace cairn::testing
