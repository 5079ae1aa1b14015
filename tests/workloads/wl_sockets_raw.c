// Internet sockets other than TCP and UDP, with the options a program sets on them, before the
// checkpoint and after restore:
// - a raw ICMP socket bound to 127.0.0.1 whose ICMP_FILTER lets only echo replies through: an
//   echo request it sends brings back the reply (the kernel answers it), carrying our id;
// - a raw UDP-protocol socket with IP_HDRINCL set by the program;
// - a raw IPv6 socket (protocol 253, for experiments) with IPV6_CHECKSUM at offset 2;
// - a UDP-Lite socket bound to 127.0.0.1 with its checksum coverage (UDPLITE_SEND_CSCOV and
//   UDPLITE_RECV_CSCOV) set, and a second one connected to it: a datagram goes through;
// - a UDP socket with IP_FREEBIND bound to 192.0.2.55 (TEST-NET-1, on no interface here).
// Each keeps its name, its options, and works. Needs CAP_NET_RAW (the suite runs as root).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wl_common.h"

#define SOL_RAW_ 255
#define ICMP_FILTER_ 1
#define UDPLITE_SEND_CSCOV_ 10
#define UDPLITE_RECV_CSCOV_ 11
#define ECHO_ID 0x4a7c

static int opt(int s, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  WL_SYS(getsockopt(s, level, name, &v, &len));
  return v;
}

static void set_opt(int s, int level, int name, int v) { WL_SYS(setsockopt(s, level, name, &v, sizeof v)); }

static uint16_t checksum(const void* data, size_t len) {
  const uint8_t* p = data;
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (len & 1) sum += (uint32_t)(p[len - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons((uint16_t)~sum);
}

// Sends an echo request with sequence `seq` to 127.0.0.1 through raw socket `r` and waits for
// the reply with our id and that sequence; anything else the filter let through fails.
static void ping(int r, uint16_t seq, const char* when) {
  struct icmphdr req = {.type = ICMP_ECHO};
  req.un.echo.id = htons(ECHO_ID);
  req.un.echo.sequence = htons(seq);
  req.checksum = checksum(&req, sizeof req);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(sendto(r, &req, sizeof req, 0, (struct sockaddr*)&to, sizeof to));
  for (;;) {
    struct pollfd p = {r, POLLIN, 0};
    WL_CHECK(poll(&p, 1, 3000) == 1, "%s: no echo reply within 3 s", when);
    uint8_t buf[256];
    ssize_t n = WL_SYS(recv(r, buf, sizeof buf, MSG_DONTWAIT));
    size_t ihl = (size_t)(buf[0] & 0xf) * 4;
    WL_CHECK(n >= (ssize_t)(ihl + sizeof(struct icmphdr)), "%s: a %zd-byte packet", when, n);
    struct icmphdr reply;
    memcpy(&reply, buf + ihl, sizeof reply);
    WL_CHECK(reply.type == ICMP_ECHOREPLY, "%s: ICMP type %d came through the filter (echo replies only)", when,
             reply.type);
    if (ntohs(reply.un.echo.id) != ECHO_ID) continue;  // another program's ping
    WL_CHECK(ntohs(reply.un.echo.sequence) == seq, "%s: reply to sequence %d, want %d", when,
             ntohs(reply.un.echo.sequence), seq);
    return;
  }
}

static void check_name(int s, const struct sockaddr_in* want, const char* what, const char* when) {
  struct sockaddr_in got;
  socklen_t len = sizeof got;
  WL_SYS(getsockname(s, (struct sockaddr*)&got, &len));
  WL_CHECK(got.sin_addr.s_addr == want->sin_addr.s_addr && got.sin_port == want->sin_port,
           "%s: %s is bound to %s:%d, want %s:%d", when, what, inet_ntoa(got.sin_addr), ntohs(got.sin_port),
           inet_ntoa(want->sin_addr), ntohs(want->sin_port));
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int icmp = WL_SYS(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
  uint32_t filter = ~(1u << ICMP_ECHOREPLY);
  WL_SYS(setsockopt(icmp, SOL_RAW_, ICMP_FILTER_, &filter, sizeof filter));
  struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(bind(icmp, (struct sockaddr*)&lo, sizeof lo));

  int hdrincl = WL_SYS(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP));
  set_opt(hdrincl, IPPROTO_IP, IP_HDRINCL, 1);

  int raw6 = WL_SYS(socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, 253));
  set_opt(raw6, IPPROTO_IPV6, IPV6_CHECKSUM, 2);

  int lite = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDPLITE));
  set_opt(lite, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV_, 20);
  set_opt(lite, IPPROTO_UDPLITE, UDPLITE_RECV_CSCOV_, 20);
  WL_SYS(bind(lite, (struct sockaddr*)&lo, sizeof lo));
  struct sockaddr_in lite_name;
  socklen_t len = sizeof lite_name;
  WL_SYS(getsockname(lite, (struct sockaddr*)&lite_name, &len));
  int lite_client = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDPLITE));
  set_opt(lite_client, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV_, 20);
  WL_SYS(connect(lite_client, (struct sockaddr*)&lite_name, sizeof lite_name));

  int freebind = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  set_opt(freebind, IPPROTO_IP, IP_FREEBIND, 1);
  struct sockaddr_in nowhere = {.sin_family = AF_INET, .sin_port = htons(47123)};
  inet_pton(AF_INET, "192.0.2.55", &nowhere.sin_addr);
  WL_SYS(bind(freebind, (struct sockaddr*)&nowhere, sizeof nowhere));

  ping(icmp, 1, "before the checkpoint");
  wl_signal_ready();
  wl_wait_go();

  const char* when = "after restore";
  uint32_t got_filter = 0;
  len = sizeof got_filter;
  WL_SYS(getsockopt(icmp, SOL_RAW_, ICMP_FILTER_, &got_filter, &len));
  WL_CHECK(got_filter == filter, "%s: ICMP_FILTER %#x, want %#x", when, got_filter, filter);
  check_name(icmp, &(struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(IPPROTO_ICMP),
                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
             "the raw ICMP socket", when);
  ping(icmp, 2, when);
  WL_CHECK(opt(icmp, SOL_SOCKET, SO_TYPE) == SOCK_RAW && opt(icmp, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_ICMP,
           "%s: the ICMP socket is type %d protocol %d", when, opt(icmp, SOL_SOCKET, SO_TYPE),
           opt(icmp, SOL_SOCKET, SO_PROTOCOL));
  WL_CHECK(opt(hdrincl, IPPROTO_IP, IP_HDRINCL) == 1, "%s: IP_HDRINCL is off on the raw UDP socket", when);
  WL_CHECK(opt(hdrincl, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_UDP, "%s: the raw socket's protocol is %d", when,
           opt(hdrincl, SOL_SOCKET, SO_PROTOCOL));
  WL_CHECK(opt(raw6, IPPROTO_IPV6, IPV6_CHECKSUM) == 2, "%s: IPV6_CHECKSUM %d, want 2", when,
           opt(raw6, IPPROTO_IPV6, IPV6_CHECKSUM));
  WL_CHECK(opt(raw6, SOL_SOCKET, SO_PROTOCOL) == 253, "%s: the raw IPv6 socket's protocol is %d", when,
           opt(raw6, SOL_SOCKET, SO_PROTOCOL));

  WL_CHECK(opt(lite, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_UDPLITE, "%s: the UDP-Lite socket is protocol %d", when,
           opt(lite, SOL_SOCKET, SO_PROTOCOL));
  WL_CHECK(opt(lite, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV_) == 20 && opt(lite, IPPROTO_UDPLITE, UDPLITE_RECV_CSCOV_) == 20,
           "%s: UDP-Lite coverage send %d recv %d, want 20 and 20", when, opt(lite, IPPROTO_UDPLITE, UDPLITE_SEND_CSCOV_),
           opt(lite, IPPROTO_UDPLITE, UDPLITE_RECV_CSCOV_));
  check_name(lite, &lite_name, "the UDP-Lite socket", when);
  WL_SYS(send(lite_client, "lite", 4, 0));
  struct pollfd p = {lite, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 3000) == 1, "%s: the UDP-Lite datagram did not arrive", when);
  char buf[16] = {0};
  WL_CHECK(recv(lite, buf, sizeof buf, MSG_DONTWAIT) == 4 && memcmp(buf, "lite", 4) == 0,
           "%s: the UDP-Lite socket received '%s'", when, buf);

  WL_CHECK(opt(freebind, IPPROTO_IP, IP_FREEBIND) == 1, "%s: IP_FREEBIND is off", when);
  check_name(freebind, &nowhere, "the IP_FREEBIND socket", when);
  wl_pass();
}
