// A datagram unix socket bound to WORKDIR/dgram with messages other sockets sent it and it has
// not read yet: three from one unbound client socket and one from a second, both closed since
// (they are not part of the checkpoint). After restore the server reads the four messages in
// order, each whole and from no name (recvfrom gives no address), and then nothing
// more (EAGAIN); a new client's message still reaches it by its name.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static struct sockaddr_un g_addr;

static void send_from_new_socket(const char* const* msgs, int n) {
  int c = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  for (int i = 0; i < n; i++) {
    WL_CHECK(sendto(c, msgs[i], strlen(msgs[i]), 0, (struct sockaddr*)&g_addr, sizeof g_addr) == (ssize_t)strlen(msgs[i]),
             "sendto: %s", wl_errstr());
  }
  close(c);
}

static void expect(int s, const char* want, const char* when) {
  char buf[256];
  struct sockaddr_un from;
  socklen_t len = sizeof from;
  memset(buf, 0, sizeof buf);
  ssize_t n = recvfrom(s, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr*)&from, &len);
  WL_CHECK(n == (ssize_t)strlen(want) && memcmp(buf, want, (size_t)n) == 0, "%s: read '%s' (%zd bytes, %s), want '%s'",
           when, buf, n, n < 0 ? wl_errstr() : "ok", want);
  WL_CHECK(len <= sizeof(sa_family_t), "%s: message '%s' came from a name (address length %u)", when, want,
           (unsigned)len);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  g_addr.sun_family = AF_UNIX;
  char path[600];
  wl_path(path, sizeof path, "dgram");
  WL_CHECK(strlen(path) < sizeof g_addr.sun_path, "WORKDIR too long for a socket name");
  strcpy(g_addr.sun_path, path);
  int s = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(s, (struct sockaddr*)&g_addr, sizeof g_addr));
  const char* first[] = {"one", "two, a little longer", "three"};
  const char* second[] = {"four from another"};
  send_from_new_socket(first, 3);
  send_from_new_socket(second, 1);

  wl_signal_ready();
  wl_wait_go();

  expect(s, "one", "after restore");
  expect(s, "two, a little longer", "after restore");
  expect(s, "three", "after restore");
  expect(s, "four from another", "after restore");
  char buf[16];
  errno = 0;
  WL_CHECK(recv(s, buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN, "after restore: a fifth message (%s)",
           errno ? wl_errstr() : "read one");
  const char* later[] = {"later"};
  send_from_new_socket(later, 1);
  expect(s, "later", "after restore, a new message");
  wl_pass();
}
