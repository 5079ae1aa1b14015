// A tree that cairn must refuse to checkpoint (network sockets are not supported yet): root and
// its child share a UDP socket bound to loopback. The workload itself checks the socket still
// works, so that a refused dump can be shown to have left the tree running untouched: after go,
// the child sends a datagram to the socket's own address and root reads it.
#include "wl_tree.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int s = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(bind(s, (struct sockaddr*)&addr, sizeof addr));
  socklen_t len = sizeof addr;
  WL_SYS(getsockname(s, (struct sockaddr*)&addr, &len));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    WL_SYS(sendto(s, "dgram", 5, 0, (struct sockaddr*)&addr, sizeof addr));
    _exit(0);
  }
  wl_tree_wait_announced("C");
  wl_tree_announce();
  wl_signal_ready();
  wl_wait_go();
  wl_tree_watchdog();
  char buf[16];
  ssize_t n = WL_SYS(recv(s, buf, sizeof buf, 0));
  WL_CHECK(n == 5 && memcmp(buf, "dgram", 5) == 0, "read %zd bytes from the UDP socket, want 'dgram'", n);
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  wl_pass();
}
