#pragma once
// The node's own IP addresses, as it tells the controller (NodeSpec.addresses): where a job's
// service address can go (common/ip_prefix.h AddressMismatch).

#include <string>
#include <vector>

namespace cairn::daemon {

// ADDR/PREFIX@DEV of every global-scope address of an interface that is up, in this network
// namespace (not loopback, not IPv4 169.254/16 or IPv6 fe80::/10 link-local ones).
std::vector<std::string> NodeAddresses();
// The names of the node's network interfaces, whatever their state (a service address may name one).
std::vector<std::string> NodeDevices();

}  // namespace cairn::daemon
