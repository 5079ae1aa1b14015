#include "common/ip_prefix.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cairn {

bool SameSubnet(const std::string& a, const std::string& b, int prefix) {
  if (a.size() != b.size()) return false;
  int bytes = prefix / 8, bits = prefix % 8;
  if (std::memcmp(a.data(), b.data(), static_cast<size_t>(bytes)) != 0) return false;
  if (bits == 0) return true;
  auto mask = static_cast<unsigned char>(0xff << (8 - bits));
  return (static_cast<unsigned char>(a[bytes]) & mask) == (static_cast<unsigned char>(b[bytes]) & mask);
}

std::string SubnetText(const IpPrefix& p) {
  std::string net = p.addr;
  for (size_t bit = static_cast<size_t>(p.prefix); bit < net.size() * 8; ++bit) {
    net[bit / 8] = static_cast<char>(static_cast<unsigned char>(net[bit / 8]) & ~(0x80u >> (bit % 8)));
  }
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(p.family, net.data(), buf, sizeof buf);
  return absl::StrCat(buf, "/", p.prefix);
}

absl::StatusOr<IpPrefix> ParseIpPrefix(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': ", why, " (write ADDR/PREFIX or ADDR/PREFIX@DEVICE, e.g. 10.0.0.5/24)"));
  };
  IpPrefix p;
  absl::string_view rest = text;
  if (size_t at = rest.find('@'); at != absl::string_view::npos) {
    p.device = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
    if (p.device.empty() || p.device.size() > 15 || p.device.find('/') != std::string::npos) {
      return bad("not a device name after '@'");
    }
  }
  size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return bad("no /PREFIX");
  std::string ip(rest.substr(0, slash));
  unsigned char buf[16];
  if (::inet_pton(AF_INET, ip.c_str(), buf) == 1) {
    p.family = AF_INET;
    p.addr.assign(reinterpret_cast<char*>(buf), 4);
  } else if (::inet_pton(AF_INET6, ip.c_str(), buf) == 1) {
    p.family = AF_INET6;
    p.addr.assign(reinterpret_cast<char*>(buf), 16);
  } else {
    return bad("not an IPv4 or IPv6 address");
  }
  if (!absl::SimpleAtoi(rest.substr(slash + 1), &p.prefix) || p.prefix < 0 ||
      p.prefix > static_cast<int>(p.addr.size() * 8)) {
    return bad("not a prefix length of that family");
  }
  return p;
}

std::string IpPrefixText(const IpPrefix& p) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(p.family, p.addr.data(), buf, sizeof buf);
  return absl::StrCat(buf, "/", p.prefix, p.device.empty() ? "" : "@" + p.device);
}

std::string AddressMismatch(const IpPrefix& address, const std::vector<IpPrefix>& node_addresses,
                            const std::set<std::string>& node_devices) {
  if (node_addresses.empty() && node_devices.empty()) return "";
  if (!address.device.empty()) {
    if (node_devices.count(address.device) != 0) return "";
    for (const IpPrefix& n : node_addresses) {
      if (n.device == address.device) return "";
    }
    return absl::StrCat("it has no device ", address.device, " for the job's address ", IpPrefixText(address));
  }
  for (const IpPrefix& n : node_addresses) {
    if (n.family == address.family && SameSubnet(n.addr, address.addr, address.prefix)) return "";
  }
  return absl::StrCat("no interface of it has an address in ", SubnetText(address), " for the job's address ",
                      IpPrefixText(address));
}

}  // namespace cairn
