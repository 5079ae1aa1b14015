#pragma once
// A job's service addresses: IP addresses that belong to the job rather than to the node it
// runs on, so that they can move with it. A server's clients reach it at such an address, and
// its established connections are bound to it: a live migration takes the address off the
// source node once the job's state is saved and puts it on the destination before the
// connections are rebuilt there (daemon/migrate.h), so that the clients keep their connections.
//
// Written `ADDR/PREFIX` (10.0.0.5/24, fd00::5/64) or `ADDR/PREFIX@DEV`. Without a device, the
// address goes on the interface that already has an address in the same subnet (the node's own
// address on that network). Added and removed through rtnetlink (RTM_NEWADDR, RTM_DELADDR) in
// the caller's network namespace. An address is announced once added, so that the peers'
// neighbour caches, which still point at the source node, learn where it went at once instead of
// after their entries expire: IPv4 by two gratuitous ARP requests, IPv6 by two unsolicited
// Neighbor Advertisements with the Override flag to all nodes. An IPv6 address is added without
// duplicate address detection (it would stay "tentative", unusable, for a second or more: the
// address was in use a moment ago, by this very job).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::net {

struct ServiceAddress {
  int family = 0;         // AF_INET or AF_INET6
  std::string addr;       // 4 or 16 bytes, network order
  int prefix = 0;         // 1-32 or 1-128
  std::string device;     // "" when chosen by subnet
  std::string text;       // as written
};

// Parses `ADDR/PREFIX[@DEV]`. InvalidArgument naming what is wrong.
absl::StatusOr<ServiceAddress> ParseServiceAddress(absl::string_view text);

// The interface (its index) address `a` goes on here: `a.device`, or the one with an address in
// a's subnet. NotFound (naming the subnet and what to do) when there is none.
absl::StatusOr<int> InterfaceFor(const ServiceAddress& a);

// Whether `a` is on an interface of this network namespace.
absl::StatusOr<bool> HasAddress(const ServiceAddress& a);

// Puts `a` on its interface (InterfaceFor) unless it is there already, and announces an IPv4
// address. Returns whether it was added (false: it was there).
absl::StatusOr<bool> AddServiceAddress(const ServiceAddress& a);

// Takes `a` off whatever interface holds it here; OK when none does.
absl::Status RemoveServiceAddress(const ServiceAddress& a);

// RemoveServiceAddress for a list of `ADDR/PREFIX[@DEV]` texts: every one is tried; the first
// error is returned after the others (each error names its address).
absl::Status RemoveServiceAddresses(const std::vector<std::string>& texts);

}  // namespace cairn::net
