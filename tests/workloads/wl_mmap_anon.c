// Anonymous mappings: a 128 MiB private area touched sparsely (every 16th page written, the rest never
// touched and must still read as zero), a 16 MiB area written in full, a 1 GiB MAP_NORESERVE area with
// only three pages written, and a MAP_SHARED anonymous area. After restore every mapping must be at
// the same address with the same content and the same flags in /proc/self/maps, and stay usable.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096ul

struct Area {
  const char* name;
  size_t size;
  int flags;
  unsigned char* p;
  char maps_line[256];  // perms and offset fields of the area's /proc/self/maps line
};

static struct Area g_areas[] = {
    {"sparse 128 MiB", 128ul << 20, MAP_PRIVATE | MAP_ANONYMOUS, NULL, ""},
    {"dense 16 MiB", 16ul << 20, MAP_PRIVATE | MAP_ANONYMOUS, NULL, ""},
    {"noreserve 1 GiB", 1ul << 30, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, NULL, ""},
    {"shared 4 MiB", 4ul << 20, MAP_SHARED | MAP_ANONYMOUS, NULL, ""},
};
#define kAreas (sizeof g_areas / sizeof g_areas[0])

static char g_maps[1 << 16];

// Copies the permission field of the /proc/self/maps line whose range holds `addr` (neighbouring
// anonymous areas with equal flags may have been merged into one line).
static void MapsPerms(unsigned char* addr, char* out, size_t size) {
  if (wl_read_file("/proc/self/maps", g_maps, sizeof g_maps) < 0) wl_fail("read maps: %s", wl_errstr());
  for (char* line = g_maps; *line;) {
    unsigned long start, end;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start <= (unsigned long)addr &&
        (unsigned long)addr < end) {
      snprintf(out, size, "%s", perms);
      return;
    }
    char* next = strchr(line, '\n');
    if (!next) break;
    line = next + 1;
  }
  wl_fail("no /proc/self/maps line holds %p", (void*)addr);
}

static int Written(size_t index, size_t page) {
  switch (index) {
    case 0: return page % 16 == 0;
    case 1: return 1;
    case 2: return page == 0 || page == 4096 || page == (1ul << 30) / kPage - 1;
    default: return 1;
  }
}

static void CheckArea(size_t index) {
  struct Area* a = &g_areas[index];
  size_t pages = a->size / kPage;
  static const unsigned char kZero[kPage];
  for (size_t pg = 0; pg < pages; pg++) {
    if (index == 2 && !Written(index, pg) && pg % 64 != 0) continue;  // sample the 1 GiB area
    unsigned char* page = a->p + pg * kPage;
    if (Written(index, pg)) {
      ptrdiff_t bad = wl_check_pattern(page, kPage, index * 1000000 + pg);
      if (bad >= 0) wl_fail("%s: page %zu differs at byte %td", a->name, pg, bad);
    } else if (memcmp(page, kZero, kPage) != 0) {
      wl_fail("%s: untouched page %zu is not zero", a->name, pg);
    }
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  for (size_t i = 0; i < kAreas; i++) {
    struct Area* a = &g_areas[i];
    a->p = mmap(NULL, a->size, PROT_READ | PROT_WRITE, a->flags, -1, 0);
    WL_CHECK(a->p != MAP_FAILED, "mmap %s: %s", a->name, wl_errstr());
    for (size_t pg = 0; pg < a->size / kPage; pg++) {
      if (Written(i, pg)) wl_fill_pattern(a->p + pg * kPage, kPage, i * 1000000 + pg);
    }
    MapsPerms(a->p, a->maps_line, sizeof a->maps_line);
  }
  wl_signal_ready();
  wl_wait_go();

  for (size_t i = 0; i < kAreas; i++) {
    struct Area* a = &g_areas[i];
    char perms[16];
    MapsPerms(a->p, perms, sizeof perms);
    WL_CHECK(strcmp(perms, a->maps_line) == 0, "%s: permissions %s became %s", a->name, a->maps_line, perms);
    CheckArea(i);
    // Still usable: write the untouched pages too.
    for (size_t pg = 1; pg < a->size / kPage && pg < 1024; pg += 2) a->p[pg * kPage + 7] = 0x77;
  }
  // The shared area must still be shared: a child sees our writes.
  struct Area* shared = &g_areas[3];
  shared->p[123] = 0x42;
  pid_t child = fork();
  WL_CHECK(child >= 0, "fork: %s", wl_errstr());
  if (child == 0) {
    shared->p[124] = shared->p[123] == 0x42 ? 0x43 : 0x13;
    _exit(0);
  }
  int status;
  WL_SYS(waitpid(child, &status, 0));
  WL_CHECK(shared->p[124] == 0x43, "MAP_SHARED anonymous area is no longer shared with a child");
  for (size_t i = 0; i < kAreas; i++) WL_SYS(munmap(g_areas[i].p, g_areas[i].size));
  wl_pass();
}
