// Descriptors in flight (sent with SCM_RIGHTS, not received yet), in the queues of unix sockets:
// - a stream pair: "first" sent with a regular file the sender keeps open, "after" (plain), then
//   "second" with the same file again. A read returns "first" and the file (a stream read stops
//   after the bytes descriptors came with), the next "aftersecond" and the file again, the
//   third nothing;
// - a datagram pair: a plain message; one with a memfd and a pipe's read end whose sender closed
//   its copies (only the message holds them) and an eventfd the sender keeps; one with a unix
//   socket end the sender closed, which itself has a message with a file in flight in its queue;
//   one with a listening socket the sender closed, which a client of the process had connected to
//   (not accepted yet): the receiver accepts that client, then a new one.
// After restore each received descriptor is the same open file description the sender holds
// (shared offset, shared counter, the pipe and the socket still connected to the ends kept), or
// holds what it held (the memfd's bytes, the file in flight in the socket in flight).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static void send_with(int s, const char* data, const int* fds, int n) {
  struct iovec iov = {(void*)data, strlen(data)};
  char control[CMSG_SPACE(8 * sizeof(int))];
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n > 0) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
  }
  WL_CHECK(sendmsg(s, &mh, 0) == (ssize_t)strlen(data), "sendmsg '%s': %s", data, wl_errstr());
}

// Reads one message (or what a stream read gives) into buf; returns its length and the
// descriptors it came with in fds (their number in *n).
static ssize_t recv_with(int s, char* buf, size_t size, int* fds, int* n) {
  struct iovec iov = {buf, size - 1};
  char control[CMSG_SPACE(8 * sizeof(int))];
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  memset(buf, 0, size);
  ssize_t got = recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  WL_CHECK(got >= 0, "recvmsg: %s", wl_errstr());
  WL_CHECK(!(mh.msg_flags & MSG_CTRUNC), "recvmsg: control data truncated");
  *n = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(fds + *n, CMSG_DATA(c), (size_t)k * sizeof(int));
      *n += k;
    }
  }
  return got;
}

static void expect_msg(int s, const char* want, int want_fds, int* fds, const char* what) {
  char buf[128];
  int n = 0;
  ssize_t got = recv_with(s, buf, sizeof buf, fds, &n);
  WL_CHECK(got == (ssize_t)strlen(want) && memcmp(buf, want, (size_t)got) == 0 && n == want_fds,
           "%s: read '%s' with %d descriptors, want '%s' with %d", what, buf, n, want, want_fds);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "shared-file");
  int file = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  WL_SYS(write(file, "0123456789", 10));
  WL_SYS(lseek(file, 2, SEEK_SET));
  int st[2], dg[2], pipefd[2], x[2], y[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st));
  WL_SYS(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg));
  WL_SYS(pipe2(pipefd, O_CLOEXEC));
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x));
  WL_SYS(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, y));
  int memfd = WL_SYS(memfd_create("in-flight", MFD_CLOEXEC));
  WL_SYS(write(memfd, "memfd bytes", 11));
  int ev = WL_SYS(eventfd(7, EFD_CLOEXEC | EFD_NONBLOCK));

  send_with(st[0], "first", &file, 1);
  send_with(st[0], "after", NULL, 0);
  send_with(st[0], "second", &file, 1);

  send_with(dg[0], "plain", NULL, 0);
  int three[3] = {memfd, pipefd[0], ev};
  send_with(dg[0], "three", three, 3);
  close(memfd);
  close(pipefd[0]);
  // y[1] gets a message carrying a file only it will hold, then y[1] itself goes in flight.
  char inner_path[600];
  wl_path(inner_path, sizeof inner_path, "inner-file");
  int inner = WL_SYS(open(inner_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  WL_SYS(write(inner, "inner", 5));
  send_with(y[0], "nested", &inner, 1);
  close(inner);
  int two[2] = {x[1], y[1]};
  send_with(dg[0], "sockets", two, 2);
  close(x[1]);
  close(y[1]);
  struct sockaddr_un name = {.sun_family = AF_UNIX};
  int nl = snprintf(name.sun_path + 1, sizeof name.sun_path - 1, "cairn-wl-scm-%d", (int)getpid());
  socklen_t name_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)nl);
  int listener = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(listener, (struct sockaddr*)&name, name_len));
  WL_SYS(listen(listener, 4));
  int waiting = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(waiting, (struct sockaddr*)&name, name_len));
  send_with(dg[0], "listener", &listener, 1);
  close(listener);

  wl_signal_ready();
  wl_wait_go();

  int fds[8];
  expect_msg(st[1], "first", 1, fds, "stream, first read");
  int got_file = fds[0];
  expect_msg(st[1], "aftersecond", 1, fds, "stream, second read");
  WL_CHECK(fds[0] != got_file, "the second read gave the same descriptor number");
  close(fds[0]);
  errno = 0;
  WL_CHECK(recv(st[1], fds, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN, "the stream held more");
  char buf[32] = {0};
  WL_CHECK(read(got_file, buf, 3) == 3 && memcmp(buf, "234", 3) == 0, "the file in flight read '%s' at its offset", buf);
  WL_CHECK(lseek(file, 0, SEEK_CUR) == 5, "the file in flight is not the sender's description (the sender's offset "
           "is %ld, want 5)", (long)lseek(file, 0, SEEK_CUR));

  expect_msg(dg[1], "plain", 0, fds, "datagram 1");
  expect_msg(dg[1], "three", 3, fds, "datagram 2");
  memset(buf, 0, sizeof buf);
  WL_CHECK(pread(fds[0], buf, 11, 0) == 11 && memcmp(buf, "memfd bytes", 11) == 0, "the memfd in flight holds '%s'", buf);
  WL_SYS(write(pipefd[1], "pipe", 4));
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(fds[1], buf, sizeof buf) == 4 && memcmp(buf, "pipe", 4) == 0, "the pipe end in flight read '%s'", buf);
  uint64_t add = 5, value = 0;
  WL_SYS(write(ev, &add, sizeof add));
  WL_CHECK(read(fds[2], &value, sizeof value) == sizeof value && value == 12,
           "the eventfd in flight counts %llu, want 12 (7 + 5 through the sender's)", (unsigned long long)value);
  expect_msg(dg[1], "sockets", 2, fds, "datagram 3");
  WL_SYS(write(x[0], "ping", 4));
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(fds[0], buf, sizeof buf) == 4 && memcmp(buf, "ping", 4) == 0, "the socket in flight read '%s'", buf);
  int inner_fds[8];
  expect_msg(fds[1], "nested", 1, inner_fds, "the socket in flight's own queue");
  memset(buf, 0, sizeof buf);
  WL_CHECK(pread(inner_fds[0], buf, 5, 0) == 5 && memcmp(buf, "inner", 5) == 0, "the file in flight in the socket in "
           "flight holds '%s'", buf);
  expect_msg(dg[1], "listener", 1, fds, "datagram 4");
  int got_listener = fds[0];
  int accepted = WL_SYS(accept4(got_listener, NULL, NULL, SOCK_CLOEXEC));
  WL_SYS(write(waiting, "queued", 6));
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(accepted, buf, sizeof buf) == 6 && memcmp(buf, "queued", 6) == 0,
           "the connection waiting on the listener in flight read '%s'", buf);
  int later = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(later, (struct sockaddr*)&name, name_len));
  int accepted2 = WL_SYS(accept4(got_listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK));
  WL_SYS(write(later, "later", 5));
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(accepted2, buf, sizeof buf) == 5, "a new connection to the listener in flight read '%s'", buf);
  errno = 0;
  WL_CHECK(recv(dg[1], buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN, "a fifth datagram waited");
  wl_pass();
}
