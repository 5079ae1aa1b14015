// A program for a container (tests/integration/container_test.cc), linked statically so that a
// busybox root file system can run it. It holds what lives in the container's own file system:
//  - a unix stream socket listening at the name /dev/shm/files.sock (on the container's tmpfs);
//  - a file it wrote and then removed, still open (/data/scratch, removed);
//  - an inotify watch on /data for files made there (IN_CREATE).
// Each connection to the socket gets one line: "deleted=CONTENT events=NAME,NAME,...", the removed
// file's content read through its descriptor and the names inotify reported so far, in order.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void die(const char* what) {
  fprintf(stderr, "files_server: %s: %s\n", what, strerror(errno));
  exit(1);
}

int main(void) {
  const char kKept[] = "kept-after-unlink";
  int scratch = open("/data/scratch", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (scratch < 0 || write(scratch, kKept, sizeof kKept - 1) != (ssize_t)(sizeof kKept - 1)) die("/data/scratch");
  if (unlink("/data/scratch") != 0) die("unlink /data/scratch");

  int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in < 0 || inotify_add_watch(in, "/data", IN_CREATE) != 1) die("inotify on /data");

  int srv = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, "/dev/shm/files.sock");
  if (srv < 0 || bind(srv, (struct sockaddr*)&a, sizeof a) != 0 || listen(srv, 8) != 0) die("/dev/shm/files.sock");

  char events[4096] = "";
  for (;;) {
    struct pollfd p[2] = {{.fd = srv, .events = POLLIN}, {.fd = in, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (p[1].revents & POLLIN) {
      char buf[4096] __attribute__((aligned(8)));
      ssize_t n = read(in, buf, sizeof buf);
      for (ssize_t at = 0; at < n;) {
        struct inotify_event* e = (struct inotify_event*)(buf + at);
        if (e->len > 0 && strlen(events) + e->len + 2 < sizeof events) {
          if (events[0] != '\0') strcat(events, ",");
          strcat(events, e->name);
        }
        at += (ssize_t)sizeof *e + e->len;
      }
    }
    if (p[0].revents & POLLIN) {
      int c = accept4(srv, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      char kept[64] = "";
      ssize_t k = pread(scratch, kept, sizeof kept - 1, 0);
      if (k > 0) kept[k] = '\0';
      char line[4200];
      int len = snprintf(line, sizeof line, "deleted=%s events=%s\n", kept, events);
      if (write(c, line, (size_t)len) < 0) {
      }
      close(c);
    }
  }
}
