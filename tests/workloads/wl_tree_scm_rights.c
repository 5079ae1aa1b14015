// Descriptors in flight between two processes of a tree: before ready, root sends its child C,
// over a seqpacket pair, a pipe's write end that root keeps too (with the message "pipe") and a
// file root then closes (with "file"; only the message holds it). After go C receives both: it
// writes through the pipe end it received and root reads that from the read end it kept (one
// pipe, shared across the processes), and C reads the file's content at its shared offset.
#define _GNU_SOURCE
#include "wl_tree.h"

#include <fcntl.h>
#include <sys/socket.h>

static void send_fd(int s, const char* msg, int fd) {
  struct iovec iov = {(void*)msg, strlen(msg)};
  char control[CMSG_SPACE(sizeof(int))];
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  WL_CHECK(sendmsg(s, &mh, 0) == (ssize_t)strlen(msg), "sendmsg '%s': %s", msg, wl_errstr());
}

static int recv_fd(int s, const char* want) {
  char buf[32] = {0};
  struct iovec iov = {buf, sizeof buf - 1};
  char control[CMSG_SPACE(sizeof(int))];
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  ssize_t n = recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  WL_CHECK(n == (ssize_t)strlen(want) && memcmp(buf, want, (size_t)n) == 0 && c != NULL &&
               c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)),
           "C: read '%s' (%zd bytes, %s) with%s one descriptor, want '%s' with one", buf, n,
           n < 0 ? wl_errstr() : "ok", c != NULL ? "" : "out", want);
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int q[2], p[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, q));
  WL_SYS(pipe2(p, O_CLOEXEC));
  char path[600];
  wl_path(path, sizeof path, "passed-file");
  int file = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  WL_SYS(write(file, "skip:content", 12));
  WL_SYS(lseek(file, 5, SEEK_SET));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(q[0]);
    close(p[0]);
    close(p[1]);
    close(file);
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    int w = recv_fd(q[1], "pipe");
    int f = recv_fd(q[1], "file");
    WL_SYS(write(w, "from-child", 10));
    char buf[16] = {0};
    WL_CHECK(read(f, buf, sizeof buf) == 7 && memcmp(buf, "content", 7) == 0, "C: the file in flight read '%s'", buf);
    _exit(0);
  }
  close(q[1]);
  send_fd(q[0], "pipe", p[1]);
  send_fd(q[0], "file", file);
  close(file);
  wl_tree_root_ready_after("C");
  wl_tree_expect_child_ok(c, "C");
  char buf[16] = {0};
  WL_CHECK(read(p[0], buf, sizeof buf) == 10 && memcmp(buf, "from-child", 10) == 0,
           "root: read '%s' from the pipe C wrote through the end it received", buf);
  wl_tree_expect_no_children();
  wl_pass();
}
