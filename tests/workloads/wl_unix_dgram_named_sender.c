// A datagram unix socket bound to WORKDIR/dgram with a message waiting from a socket that is bound
// itself (WORKDIR/client, still open): a restore could not send it again from that name, which its
// sender still holds, so the dump must refuse, naming the sender. After go the message is read
// as it was, from WORKDIR/client.
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static void name(struct sockaddr_un* a, const char* file) {
  char path[600];
  wl_path(path, sizeof path, file);
  WL_CHECK(strlen(path) < sizeof a->sun_path, "WORKDIR too long for a socket name");
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  strcpy(a->sun_path, path);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_un server, client;
  name(&server, "dgram");
  name(&client, "client");
  int s = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(s, (struct sockaddr*)&server, sizeof server));
  int c = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(c, (struct sockaddr*)&client, sizeof client));
  WL_CHECK(sendto(c, "hello", 5, 0, (struct sockaddr*)&server, sizeof server) == 5, "sendto: %s", wl_errstr());

  wl_signal_ready();
  wl_wait_go();

  char buf[16] = {0};
  struct sockaddr_un from;
  socklen_t len = sizeof from;
  WL_CHECK(recvfrom(s, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr*)&from, &len) == 5 && strcmp(buf, "hello") == 0,
           "after go: the message is gone (%s)", wl_errstr());
  WL_CHECK(strcmp(from.sun_path, client.sun_path) == 0, "after go: the message came from '%s'", from.sun_path);
  wl_pass();
}
