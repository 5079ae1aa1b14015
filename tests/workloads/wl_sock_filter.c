// A classic BPF socket filter (SO_ATTACH_FILTER) locked with SO_LOCK_FILTER, on the receiving end of an
// AF_UNIX datagram socketpair (where the filter sees the payload at offset 0). The filter drops
// datagrams whose first byte is 'x' and accepts the rest; a dropped datagram still counts as sent.
// Before the checkpoint and after restore: sending "xdrop" then "keep" delivers only "keep";
// SO_LOCK_FILTER reads 1 and SO_DETACH_FILTER fails EPERM; SO_GET_FILTER returns the same program.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wl_common.h"

#ifndef SO_LOCK_FILTER
#define SO_LOCK_FILTER 44
#endif

static struct sock_filter kProg[] = {
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 'x', 0, 1),
    BPF_STMT(BPF_RET | BPF_K, 0),
    BPF_STMT(BPF_RET | BPF_K, 0xffff),
};
#define PROG_LEN (sizeof kProg / sizeof kProg[0])

static void check(int tx, int rx, const char* when) {
  WL_CHECK(send(tx, "xdrop", 5, 0) == 5, "%s: send xdrop: %s", when, wl_errstr());
  WL_CHECK(send(tx, "keep", 4, 0) == 4, "%s: send keep: %s", when, wl_errstr());
  char buf[16] = {0};
  ssize_t n = recv(rx, buf, sizeof buf - 1, MSG_DONTWAIT);
  WL_CHECK(n == 4 && memcmp(buf, "keep", 4) == 0, "%s: first datagram received is %zd bytes '%s', want 'keep' (%s)",
           when, n, n >= 0 ? buf : "", n < 0 ? wl_errstr() : "the filter let 'xdrop' through?");
  errno = 0;
  n = recv(rx, buf, sizeof buf, MSG_DONTWAIT);
  WL_CHECK(n == -1 && errno == EAGAIN, "%s: a second datagram (%zd bytes) arrived, want none", when, n);
  int lock = 0;
  socklen_t len = sizeof lock;
  WL_SYS(getsockopt(rx, SOL_SOCKET, SO_LOCK_FILTER, &lock, &len));
  WL_CHECK(lock == 1, "%s: SO_LOCK_FILTER reads %d, want 1", when, lock);
  struct sock_filter got[16];
  socklen_t count = 16;  // SO_GET_FILTER's length is counted in instructions
  WL_SYS(getsockopt(rx, SOL_SOCKET, SO_GET_FILTER, got, &count));
  WL_CHECK(count == PROG_LEN && memcmp(got, kProg, sizeof kProg) == 0,
           "%s: SO_GET_FILTER returns %u instructions, want the %zu attached", when, count, PROG_LEN);
  int dummy = 0;
  errno = 0;
  WL_CHECK(setsockopt(rx, SOL_SOCKET, SO_DETACH_FILTER, &dummy, sizeof dummy) == -1 && errno == EPERM,
           "%s: SO_DETACH_FILTER on a locked filter: %s, want EPERM", when, errno ? wl_errstr() : "succeeded");
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int sv[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv));
  struct sock_fprog prog = {PROG_LEN, kProg};
  WL_SYS(setsockopt(sv[1], SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog));
  int one = 1;
  WL_SYS(setsockopt(sv[1], SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof one));
  check(sv[0], sv[1], "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(sv[0], sv[1], "after restore");
  wl_pass();
}
