// Network namespaces as machines on one wire, for the tests that move connections between
// network stacks: a bridge in the test's own namespace and, per node, a namespace with a veth
// into the bridge and an address SUBNET.(i+1)/24. Removed (namespaces, bridge) on destruction.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cairn::testing {

class NetworkNodes {
 public:
  NetworkNodes() = default;
  NetworkNodes(const NetworkNodes&) = delete;
  NetworkNodes& operator=(const NetworkNodes&) = delete;
  ~NetworkNodes() { Remove(); }
  // Deletes the namespaces and the bridge (call it while the scratch directory exists).
  void Remove();

  // Makes one namespace per name of `nodes` (named cairnNAME<tag>), `subnet` as "10.77.0";
  // `scratch`: a directory for the output of the commands it runs. `device`: the name of every
  // node's veth inside its namespace (as machines all have an eth0; default: unique names).
  ::testing::AssertionResult Create(const std::vector<std::string>& nodes, const std::string& subnet,
                                    const std::string& scratch, const std::string& device = "");

  const std::string& Namespace(size_t i) const { return ns_[i]; }
  std::string Path(size_t i) const { return "/var/run/netns/" + ns_[i]; }
  const std::string& Device(size_t i) const { return dev_[i]; }  // its veth, inside it
  std::string Address(size_t i) const { return subnet_ + "." + std::to_string(i + 1); }
  // nsenter's arguments that run a command in node i's network namespace alone (`ip netns exec`
  // would make a mount namespace too).
  std::vector<std::string> Enter(size_t i) const { return {"/usr/bin/nsenter", "--net=" + Path(i)}; }

  // A second wire: another bridge, and in every node a veth `device` into it, up, with no
  // address (a network only jobs' service addresses are on, say).
  ::testing::AssertionResult AddWire(const std::string& device);

  // Puts SUBNET.254 on the bridge: this namespace (the test's) becomes a host on the wire, which
  // the nodes reach and which reaches them (e.g. a controller the nodes' daemons register with).
  bool JoinWire();
  std::string WireAddress() const { return subnet_ + ".254"; }

  // Runs /usr/sbin/ip ARGS; Last() describes the run.
  bool Ip(const std::vector<std::string>& args);
  const std::string& Last() const { return last_; }
  // Whether `addr` is on an interface of node i.
  bool HasAddress(size_t i, const std::string& addr);

  // A TCP connection to `addr`:`port` made from node i (the socket stays in its namespace);
  // retried for 5 s; -1 if none.
  int ConnectFrom(size_t i, const std::string& addr, int port) const;

 private:
  std::string subnet_, bridge_, last_, scratch_ = "/tmp", tag_;
  std::vector<std::string> more_bridges_;
  std::vector<std::string> ns_, dev_;
};

}  // namespace cairn::testing
