// Unix sockets that are not pairs survive a round trip: a stream socket listening on a path
// in the work directory (socket file mode 0660), one listening on an abstract name, a
// datagram socket bound to a path with a datagram socket connected to it, and a socket
// created but not used yet. After go: both listeners accept a new connection that carries
// data; the connected datagram socket's message reaches the bound one; the names and the
// socket file's mode are unchanged; the unused socket can still connect.
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static socklen_t unix_addr(struct sockaddr_un* a, const char* path, int abstract) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (abstract) {
    memcpy(a->sun_path + 1, path, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  }
  memcpy(a->sun_path, path, n + 1);
  return sizeof *a;
}

static void exchange(int l, struct sockaddr_un* a, socklen_t alen, int client, const char* what) {
  int c = client >= 0 ? client : WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(c, (struct sockaddr*)a, alen));
  int s = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  WL_SYS(write(c, "hello", 5));
  char buf[8] = {0};
  WL_CHECK(read(s, buf, sizeof buf) == 5 && memcmp(buf, "hello", 5) == 0, "%s: server read '%s'", what, buf);
  close(c);
  close(s);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600], dpath[600], abstract[64];
  wl_path(path, sizeof path, "stream.sock");
  wl_path(dpath, sizeof dpath, "dgram.sock");
  snprintf(abstract, sizeof abstract, "cairn-wl-%d", (int)getpid());

  struct sockaddr_un a, aa, da;
  socklen_t alen = unix_addr(&a, path, 0), aalen = unix_addr(&aa, abstract, 1), dalen = unix_addr(&da, dpath, 0);
  int l = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(l, (struct sockaddr*)&a, alen));
  WL_SYS(chmod(path, 0660));
  WL_SYS(listen(l, 4));
  int la = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(la, (struct sockaddr*)&aa, aalen));
  WL_SYS(listen(la, 4));
  int db = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(db, (struct sockaddr*)&da, dalen));
  int dc = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(dc, (struct sockaddr*)&da, dalen));
  int unused = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));

  wl_signal_ready();
  wl_wait_go();

  struct stat st;
  WL_SYS(stat(path, &st));
  WL_CHECK(S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0660, "socket file mode %o, want a socket with 0660",
           st.st_mode);
  struct sockaddr_un got;
  socklen_t glen = sizeof got;
  WL_SYS(getsockname(l, (struct sockaddr*)&got, &glen));
  WL_CHECK(strcmp(got.sun_path, path) == 0, "listener is bound to '%s', want '%s'", got.sun_path, path);
  glen = sizeof got;
  WL_SYS(getsockname(la, (struct sockaddr*)&got, &glen));
  WL_CHECK(glen == aalen && memcmp(&got, &aa, aalen) == 0, "abstract listener lost its name");
  exchange(l, &a, alen, -1, "path listener");
  exchange(la, &aa, aalen, unused, "abstract listener (from the unused socket)");
  WL_SYS(send(dc, "dgram", 5, 0));
  char buf[8] = {0};
  WL_CHECK(recv(db, buf, sizeof buf, 0) == 5 && memcmp(buf, "dgram", 5) == 0, "bound datagram socket read '%s'", buf);
  unlink(path);
  unlink(dpath);
  wl_pass();
}
