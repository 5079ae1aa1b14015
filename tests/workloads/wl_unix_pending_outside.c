// Refused (checkpointed alone, without --tree): a client whose connection a listening unix
// socket outside the checkpoint (a child's) has not accepted yet. Such a client shows no peer,
// like one whose peer was closed; taken for that, it would come back cut off from a server that
// is still there.
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  char p[600];
  wl_path(p, sizeof p, "outside");
  WL_CHECK(strlen(p) < sizeof a.sun_path, "WORKDIR too long for a socket name");
  strcpy(a.sun_path, p);
  int up[2];
  WL_SYS(pipe(up));
  pid_t server = WL_SYS(fork());
  if (server == 0) {  // listens, never accepts, ends with its parent
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int l = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(bind(l, (struct sockaddr*)&a, sizeof a));
    WL_SYS(listen(l, 4));
    WL_SYS(write(up[1], "L", 1));
    for (;;) pause();
  }
  close(up[1]);
  char ch;
  WL_CHECK(read(up[0], &ch, 1) == 1, "the server child did not listen");
  close(up[0]);
  int c = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(c, (struct sockaddr*)&a, sizeof a));
  wl_signal_ready();
  wl_wait_go();
  struct sockaddr_un peer;
  socklen_t len = sizeof peer;
  WL_SYS(getpeername(c, (struct sockaddr*)&peer, &len));
  kill(server, SIGKILL);
  wl_pass();
}
