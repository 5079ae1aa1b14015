#pragma once
// The socket options a checkpoint records and restore sets again: those of this list whose
// value differs from a fresh socket's of the same family, type and protocol (so that a system
// default, a sysctl, is not frozen into the checkpoint). `restore --verify` reads the same
// list back, each option against the recorded value or, unrecorded, a fresh socket's.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <map>
#include <string>
#include <utility>

namespace cairn::image {

// From linux/udp.h and linux/icmp.h, which do not mix with the libc headers.
constexpr int kUdpliteSendCscov = 10;
constexpr int kUdpliteRecvCscov = 11;
constexpr int kSolRaw = 255;
constexpr int kIcmpFilter = 1;

struct SocketOptionSpec {
  int level;
  int name;
  const char* text;
};

// The options that apply to a socket of `family` (AF_INET, AF_INET6, AF_UNIX...), `type` and
// `protocol`, in the order restore sets them (IPV6_V6ONLY first: it must precede bind), at the
// level the family uses (IP_TOS is IPV6_TCLASS on IPv6). Calls fn(spec) for each.
template <typename Fn>
void ForEachSocketOption(int family, int type, int protocol, Fn fn) {
  static constexpr SocketOptionSpec kCommon[] = {
      {SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR"}, {SOL_SOCKET, SO_REUSEPORT, "SO_REUSEPORT"},
      {SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE"}, {SOL_SOCKET, SO_BROADCAST, "SO_BROADCAST"},
      {SOL_SOCKET, SO_LINGER, "SO_LINGER"},       {SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE"},
      {SOL_SOCKET, SO_PRIORITY, "SO_PRIORITY"},   {SOL_SOCKET, SO_RCVLOWAT, "SO_RCVLOWAT"},
      {SOL_SOCKET, SO_MARK, "SO_MARK"},
  };
  static constexpr SocketOptionSpec kTcp[] = {
      {IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY"},           {IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE"},
      {IPPROTO_TCP, TCP_KEEPINTVL, "TCP_KEEPINTVL"},       {IPPROTO_TCP, TCP_KEEPCNT, "TCP_KEEPCNT"},
      {IPPROTO_TCP, TCP_DEFER_ACCEPT, "TCP_DEFER_ACCEPT"}, {IPPROTO_TCP, TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT"},
      {IPPROTO_TCP, TCP_FASTOPEN, "TCP_FASTOPEN"},
  };
  if (family == AF_INET6) fn(SocketOptionSpec{IPPROTO_IPV6, IPV6_V6ONLY, "IPV6_V6ONLY"});
  for (const SocketOptionSpec& o : kCommon) fn(o);
  if (protocol == IPPROTO_TCP && type == SOCK_STREAM) {
    for (const SocketOptionSpec& o : kTcp) fn(o);
  }
  if (protocol == IPPROTO_UDPLITE && type == SOCK_DGRAM) {
    fn(SocketOptionSpec{IPPROTO_UDPLITE, kUdpliteSendCscov, "UDPLITE_SEND_CSCOV"});
    fn(SocketOptionSpec{IPPROTO_UDPLITE, kUdpliteRecvCscov, "UDPLITE_RECV_CSCOV"});
  }
  if (type == SOCK_RAW && family == AF_INET) {
    fn(SocketOptionSpec{IPPROTO_IP, IP_HDRINCL, "IP_HDRINCL"});
    if (protocol == IPPROTO_ICMP) fn(SocketOptionSpec{kSolRaw, kIcmpFilter, "ICMP_FILTER"});
  }
  if (type == SOCK_RAW && family == AF_INET6) {
    fn(SocketOptionSpec{IPPROTO_IPV6, IPV6_HDRINCL, "IPV6_HDRINCL"});
    fn(SocketOptionSpec{IPPROTO_IPV6, IPV6_CHECKSUM, "IPV6_CHECKSUM"});
  }
  if (family == AF_INET) {
    fn(SocketOptionSpec{IPPROTO_IP, IP_TOS, "IP_TOS"});
    fn(SocketOptionSpec{IPPROTO_IP, IP_FREEBIND, "IP_FREEBIND"});
  } else if (family == AF_INET6) {
    fn(SocketOptionSpec{IPPROTO_IPV6, IPV6_TCLASS, "IPV6_TCLASS"});  // IPV6_FREEBIND: not in older headers
  }
}

// The value of each option of the list on a fresh socket of `family`, `type` and `protocol`
// (getsockopt's bytes; options the socket does not have are left out), read once per kind of
// socket and kept: a checkpoint of a server with 1,000 connections asks 1,000 times.
const std::map<std::pair<int, int>, std::string>& FreshSocketOptions(int family, int type, int protocol);

}  // namespace cairn::image
