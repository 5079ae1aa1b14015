// A unix datagram socket bound to a path whose file and directory are gone: bound to
// WORKDIR/sub/sock, then the socket file unlinked and WORKDIR/sub removed. The socket keeps its
// address although nothing can reach it by name. After restore getsockname returns the same path
// (same length), SO_TYPE is SOCK_DGRAM, and WORKDIR/sub has not reappeared (a restore that binds
// again would have to recreate it, and should remove it after).
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static void check(int s, const struct sockaddr_un* want, socklen_t wantlen, const char* sub, const char* when) {
  struct sockaddr_un got;
  socklen_t len = sizeof got;
  memset(&got, 0, sizeof got);
  WL_SYS(getsockname(s, (struct sockaddr*)&got, &len));
  WL_CHECK(len == wantlen && memcmp(&got, want, len) == 0, "%s: getsockname is '%s' (len %u), want '%s' (len %u)",
           when, got.sun_path, (unsigned)len, want->sun_path, (unsigned)wantlen);
  int type = 0;
  socklen_t tl = sizeof type;
  WL_SYS(getsockopt(s, SOL_SOCKET, SO_TYPE, &type, &tl));
  WL_CHECK(type == SOCK_DGRAM, "%s: SO_TYPE %d, want SOCK_DGRAM", when, type);
  struct stat st;
  WL_CHECK(stat(sub, &st) == -1 && errno == ENOENT, "%s: WORKDIR/sub exists", when);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char sub[600];
  wl_path(sub, sizeof sub, "sub");
  WL_SYS(mkdir(sub, 0755));
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  char path[600];
  wl_path(path, sizeof path, "sub/sock");
  WL_CHECK(strlen(path) < sizeof addr.sun_path, "socket path too long");
  strcpy(addr.sun_path, path);
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);
  int s = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(s, (struct sockaddr*)&addr, alen));
  WL_SYS(unlink(path));
  WL_SYS(rmdir(sub));
  check(s, &addr, alen, sub, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(s, &addr, alen, sub, "after restore");
  wl_pass();
}
