// Refused: a connection to a listening unix socket not accepted yet, whose client has already
// written to it. What it wrote waits in the server's end, which no descriptor reaches before
// accept, so it cannot be saved.
#define _GNU_SOURCE
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  char p[600];
  wl_path(p, sizeof p, "server");
  WL_CHECK(strlen(p) < sizeof a.sun_path, "WORKDIR too long for a socket name");
  strcpy(a.sun_path, p);
  int l = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(l, (struct sockaddr*)&a, sizeof a));
  WL_SYS(listen(l, 4));
  int c = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(c, (struct sockaddr*)&a, sizeof a));
  WL_SYS(send(c, "hello", 5, 0));
  wl_signal_ready();
  wl_wait_go();
  int s = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  char buf[8];
  WL_CHECK(recv(s, buf, sizeof buf, 0) == 5, "the server did not read what its client sent");
  wl_pass();
}
