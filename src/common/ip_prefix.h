#pragma once
// An IP address with its prefix length and, optionally, a device: `10.0.0.5/24`,
// `fd00::5/64@eth1`. How a job's service address and a node's own addresses are written
// (engine/net/address.h puts the former on an interface), and the one question the controller
// asks of them: can this address go on that node — an interface with an address in its subnet
// (the daemon's InterfaceFor), or the device it names.

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn {

struct IpPrefix {
  int family = 0;      // AF_INET or AF_INET6
  std::string addr;    // 4 or 16 bytes, network order
  int prefix = 0;      // 0-32 or 0-128
  std::string device;  // "" when none was named
};

// Parses `ADDR/PREFIX[@DEV]`; InvalidArgument naming `text` when it is not that.
absl::StatusOr<IpPrefix> ParseIpPrefix(absl::string_view text);

// `ADDR/PREFIX@DEV` (without `@DEV` when device is empty).
std::string IpPrefixText(const IpPrefix& p);

// Whether addresses `a` and `b` (raw, 4 or 16 bytes) share their first `prefix` bits.
bool SameSubnet(const std::string& a, const std::string& b, int prefix);
// `p`'s subnet as text, its host bits cleared: "10.0.0.0/24".
std::string SubnetText(const IpPrefix& p);

// Why `address` (a job's service address) cannot go on a node whose own addresses are
// `node_addresses` (ADDR/PREFIX@DEV each) on the interfaces `node_devices`: it names a device the
// node lacks, or no address of the node is in its subnet. Empty when it can, or when the node
// said nothing of its addresses and devices.
std::string AddressMismatch(const IpPrefix& address, const std::vector<IpPrefix>& node_addresses,
                            const std::set<std::string>& node_devices);

}  // namespace cairn
