// Protections: one 16-page area split by mprotect into read-write, PROT_NONE, read-only and
// read-exec pieces, a separate 1 MiB PROT_NONE reservation, and the guard area below a thread's
// stack. Content written before a piece was protected must survive (the dumper has to read pages the
// process itself may not read). After restore: reads of PROT_NONE pages and writes to read-only
// pages must still fault (checked with a SIGSEGV handler and sigsetjmp), and the other pieces must
// work.
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096ul

static sigjmp_buf g_jump;
static volatile void* g_fault_addr;

static void OnSegv(int sig, siginfo_t* info, void* ctx) {
  (void)sig;
  (void)ctx;
  g_fault_addr = info->si_addr;
  siglongjmp(g_jump, 1);
}

// Returns 1 when the access faulted at `addr`.
static int Faults(volatile unsigned char* addr, int write) {
  g_fault_addr = NULL;
  if (sigsetjmp(g_jump, 1) == 0) {
    if (write) {
      *addr = 1;
    } else {
      (void)*addr;
    }
    return 0;
  }
  if (g_fault_addr != (void*)addr) wl_fail("fault at %p, expected %p", (void*)g_fault_addr, (void*)addr);
  return 1;
}

struct Piece {
  const char* name;
  size_t first_page, pages;
  int prot;
};

static const struct Piece kPieces[] = {
    {"read-write", 0, 4, PROT_READ | PROT_WRITE},
    {"none", 4, 4, PROT_NONE},
    {"read-only", 8, 3, PROT_READ},
    {"read-exec", 11, 2, PROT_READ | PROT_EXEC},
    {"none (last)", 13, 3, PROT_NONE},
};
#define kPieceCount (sizeof kPieces / sizeof kPieces[0])
#define kAreaPages 16

static volatile int g_go;

static void* ThreadMain(void* arg) {
  (void)arg;
  while (!g_go) wl_sleep_ms(5);
  return NULL;
}

static void CheckPiece(unsigned char* area, const struct Piece* piece) {
  for (size_t pg = piece->first_page; pg < piece->first_page + piece->pages; pg++) {
    volatile unsigned char* p = area + pg * kPage + 100;
    int readable = (piece->prot & PROT_READ) != 0;
    int writable = (piece->prot & PROT_WRITE) != 0;
    if (Faults(p, 0) == readable) wl_fail("%s page %zu: read %s", piece->name, pg, readable ? "faulted" : "did not fault");
    if (!writable && !Faults(p, 1)) wl_fail("%s page %zu: write did not fault", piece->name, pg);
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO;
  WL_SYS(sigaction(SIGSEGV, &sa, NULL));

  unsigned char* area = mmap(NULL, kAreaPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(area != MAP_FAILED, "mmap: %s", wl_errstr());
  wl_fill_pattern(area, kAreaPages * kPage, 4242);
  for (size_t i = 0; i < kPieceCount; i++) {
    WL_SYS(mprotect(area + kPieces[i].first_page * kPage, kPieces[i].pages * kPage, kPieces[i].prot));
  }
  unsigned char* reservation = mmap(NULL, 256 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  WL_CHECK(reservation != MAP_FAILED, "mmap reservation: %s", wl_errstr());

  // A thread with a guard page of its own.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_attr_setguardsize(&attr, 4 * kPage);
  pthread_t thread;
  int rc = pthread_create(&thread, &attr, ThreadMain, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  void* stack_addr;
  size_t stack_size;
  pthread_attr_t actual;
  WL_CHECK(pthread_getattr_np(thread, &actual) == 0, "pthread_getattr_np failed");
  WL_CHECK(pthread_attr_getstack(&actual, &stack_addr, &stack_size) == 0, "pthread_attr_getstack failed");
  unsigned char* guard = (unsigned char*)stack_addr - kPage;  // the guard sits just below the stack
  WL_CHECK(Faults(guard, 0), "thread stack guard page readable before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  for (size_t i = 0; i < kPieceCount; i++) CheckPiece(area, &kPieces[i]);
  WL_CHECK(Faults(reservation, 0) && Faults(reservation + 255 * kPage, 1), "PROT_NONE reservation is accessible");
  WL_CHECK(Faults(guard, 0), "thread stack guard page became readable");

  // Content kept under every protection: open everything up and compare.
  WL_SYS(mprotect(area, kAreaPages * kPage, PROT_READ | PROT_WRITE));
  ptrdiff_t bad = wl_check_pattern(area, kAreaPages * kPage, 4242);
  WL_CHECK(bad < 0, "content differs at offset %td (page %td)", bad, bad / (ptrdiff_t)kPage);
  WL_SYS(mprotect(reservation, 256 * kPage, PROT_READ | PROT_WRITE));
  reservation[5] = 9;
  WL_CHECK(reservation[5] == 9 && reservation[4096 * 7] == 0, "reservation unusable after mprotect");

  g_go = 1;
  pthread_join(thread, NULL);
  wl_pass();
}
