// FPU/SSE/AVX state: threads keep values only in vector registers across the checkpoint and compare
// them afterwards. One thread holds xmm0-15 (SSE) while spinning in user space, one holds ymm0-15
// (AVX, when the CPU and kernel enable it) while looping around sched_yield, one holds zmm0-31 and
// k0-7 (AVX-512, when enabled). Each thread also sets its own rounding mode and x87 precision
// control, which live in MXCSR and the x87 control word and must come back per thread.
#define _GNU_SOURCE
#include <cpuid.h>
#include <fenv.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "wl_common.h"

static volatile int g_go;
static volatile int g_parked[3];

// XCR0 bits: 1 SSE, 2 AVX (upper ymm), 5-7 AVX-512 (opmask, upper zmm0-15, zmm16-31).
static uint64_t Xcr0(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static int HaveAvx(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_AVX)) return 0;
  return (Xcr0() & 0x6) == 0x6;
}

static int HaveAvx512(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX512F)) return 0;
  return (Xcr0() & 0xe6) == 0xe6;
}

// Control state each thread sets for itself: rounding mode (MXCSR and x87 CW) and x87 precision.
static void SetControl(int round, uint16_t precision_bits) {
  if (fesetround(round) != 0) wl_fail("fesetround(%d) failed", round);
  uint16_t cw;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  cw = (uint16_t)((cw & ~0x0300) | precision_bits);
  __asm__ volatile("fldcw %0" : : "m"(cw));
}

static void CheckControl(const char* who, int round, uint16_t precision_bits) {
  if (fegetround() != round) wl_fail("%s: rounding mode %#x, want %#x", who, fegetround(), round);
  uint16_t cw;
  uint32_t mxcsr;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  if ((cw & 0x0300) != precision_bits) wl_fail("%s: x87 precision %#x, want %#x", who, cw & 0x300, precision_bits);
  if (((mxcsr >> 13) & 3) != ((cw >> 10) & 3)) wl_fail("%s: MXCSR rounding disagrees with x87", who);
}

// --- SSE: xmm0-15 hold 256 bytes while spinning in user space.
static void* SseThread(void* arg) {
  (void)arg;
  SetControl(FE_TOWARDZERO, 0x0000);  // single precision
  _Alignas(16) unsigned char in[16 * 16], out[16 * 16];
  wl_fill_pattern(in, sizeof in, 101);
  __asm__ volatile(
      "movdqa 0x00(%[in]), %%xmm0\n\t movdqa 0x10(%[in]), %%xmm1\n\t"
      "movdqa 0x20(%[in]), %%xmm2\n\t movdqa 0x30(%[in]), %%xmm3\n\t"
      "movdqa 0x40(%[in]), %%xmm4\n\t movdqa 0x50(%[in]), %%xmm5\n\t"
      "movdqa 0x60(%[in]), %%xmm6\n\t movdqa 0x70(%[in]), %%xmm7\n\t"
      "movdqa 0x80(%[in]), %%xmm8\n\t movdqa 0x90(%[in]), %%xmm9\n\t"
      "movdqa 0xa0(%[in]), %%xmm10\n\t movdqa 0xb0(%[in]), %%xmm11\n\t"
      "movdqa 0xc0(%[in]), %%xmm12\n\t movdqa 0xd0(%[in]), %%xmm13\n\t"
      "movdqa 0xe0(%[in]), %%xmm14\n\t movdqa 0xf0(%[in]), %%xmm15\n\t"
      "movl $1, (%[parked])\n\t"
      "1: pause\n\t cmpl $0, (%[go])\n\t je 1b\n\t"
      "movdqa %%xmm0, 0x00(%[out])\n\t movdqa %%xmm1, 0x10(%[out])\n\t"
      "movdqa %%xmm2, 0x20(%[out])\n\t movdqa %%xmm3, 0x30(%[out])\n\t"
      "movdqa %%xmm4, 0x40(%[out])\n\t movdqa %%xmm5, 0x50(%[out])\n\t"
      "movdqa %%xmm6, 0x60(%[out])\n\t movdqa %%xmm7, 0x70(%[out])\n\t"
      "movdqa %%xmm8, 0x80(%[out])\n\t movdqa %%xmm9, 0x90(%[out])\n\t"
      "movdqa %%xmm10, 0xa0(%[out])\n\t movdqa %%xmm11, 0xb0(%[out])\n\t"
      "movdqa %%xmm12, 0xc0(%[out])\n\t movdqa %%xmm13, 0xd0(%[out])\n\t"
      "movdqa %%xmm14, 0xe0(%[out])\n\t movdqa %%xmm15, 0xf0(%[out])\n\t"
      :
      : [in] "r"(in), [out] "r"(out), [go] "r"(&g_go), [parked] "r"(&g_parked[0])
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
  ptrdiff_t bad = wl_check_pattern(out, sizeof out, 101);
  if (bad >= 0) wl_fail("SSE: xmm%td byte %td changed", bad / 16, bad % 16);
  CheckControl("SSE thread", FE_TOWARDZERO, 0x0000);
  return NULL;
}

// --- AVX: ymm0-15 hold 512 bytes while looping around sched_yield.
__attribute__((target("avx"))) static void* AvxThread(void* arg) {
  (void)arg;
  SetControl(FE_UPWARD, 0x0200);  // double precision
  _Alignas(32) unsigned char in[16 * 32], out[16 * 32];
  wl_fill_pattern(in, sizeof in, 202);
  __asm__ volatile(
      "vmovdqa 0x000(%[in]), %%ymm0\n\t vmovdqa 0x020(%[in]), %%ymm1\n\t"
      "vmovdqa 0x040(%[in]), %%ymm2\n\t vmovdqa 0x060(%[in]), %%ymm3\n\t"
      "vmovdqa 0x080(%[in]), %%ymm4\n\t vmovdqa 0x0a0(%[in]), %%ymm5\n\t"
      "vmovdqa 0x0c0(%[in]), %%ymm6\n\t vmovdqa 0x0e0(%[in]), %%ymm7\n\t"
      "vmovdqa 0x100(%[in]), %%ymm8\n\t vmovdqa 0x120(%[in]), %%ymm9\n\t"
      "vmovdqa 0x140(%[in]), %%ymm10\n\t vmovdqa 0x160(%[in]), %%ymm11\n\t"
      "vmovdqa 0x180(%[in]), %%ymm12\n\t vmovdqa 0x1a0(%[in]), %%ymm13\n\t"
      "vmovdqa 0x1c0(%[in]), %%ymm14\n\t vmovdqa 0x1e0(%[in]), %%ymm15\n\t"
      "movl $1, (%[parked])\n\t"
      "1: cmpl $0, (%[go])\n\t jne 2f\n\t"
      "mov $24, %%eax\n\t syscall\n\t jmp 1b\n\t"  // sched_yield
      "2:\n\t"
      "vmovdqa %%ymm0, 0x000(%[out])\n\t vmovdqa %%ymm1, 0x020(%[out])\n\t"
      "vmovdqa %%ymm2, 0x040(%[out])\n\t vmovdqa %%ymm3, 0x060(%[out])\n\t"
      "vmovdqa %%ymm4, 0x080(%[out])\n\t vmovdqa %%ymm5, 0x0a0(%[out])\n\t"
      "vmovdqa %%ymm6, 0x0c0(%[out])\n\t vmovdqa %%ymm7, 0x0e0(%[out])\n\t"
      "vmovdqa %%ymm8, 0x100(%[out])\n\t vmovdqa %%ymm9, 0x120(%[out])\n\t"
      "vmovdqa %%ymm10, 0x140(%[out])\n\t vmovdqa %%ymm11, 0x160(%[out])\n\t"
      "vmovdqa %%ymm12, 0x180(%[out])\n\t vmovdqa %%ymm13, 0x1a0(%[out])\n\t"
      "vmovdqa %%ymm14, 0x1c0(%[out])\n\t vmovdqa %%ymm15, 0x1e0(%[out])\n\t"
      "vzeroupper\n\t"
      :
      : [in] "r"(in), [out] "r"(out), [go] "r"(&g_go), [parked] "r"(&g_parked[1])
      : "rax", "rcx", "r11", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
        "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
  ptrdiff_t bad = wl_check_pattern(out, sizeof out, 202);
  if (bad >= 0) wl_fail("AVX: ymm%td byte %td changed", bad / 32, bad % 32);
  CheckControl("AVX thread", FE_UPWARD, 0x0200);
  return NULL;
}

// --- AVX-512: zmm0-31 and k1-7 while spinning in user space.
__attribute__((target("avx512f"))) static void* Avx512Thread(void* arg) {
  (void)arg;
  SetControl(FE_DOWNWARD, 0x0300);  // extended precision
  _Alignas(64) unsigned char in[32 * 64], out[32 * 64];
  uint16_t k_in[7], k_out[7];
  wl_fill_pattern(in, sizeof in, 303);
  wl_fill_pattern(k_in, sizeof k_in, 304);
#define LOADZ(n) "vmovdqa64 " #n "*64(%[in]), %%zmm" #n "\n\t"
#define STOREZ(n) "vmovdqa64 %%zmm" #n ", " #n "*64(%[out])\n\t"
#define LOADK(n) "kmovw " #n "*2-2(%[kin]), %%k" #n "\n\t"
#define STOREK(n) "kmovw %%k" #n ", " #n "*2-2(%[kout])\n\t"
  __asm__ volatile(
      LOADZ(0) LOADZ(1) LOADZ(2) LOADZ(3) LOADZ(4) LOADZ(5) LOADZ(6) LOADZ(7)
      LOADZ(8) LOADZ(9) LOADZ(10) LOADZ(11) LOADZ(12) LOADZ(13) LOADZ(14) LOADZ(15)
      LOADZ(16) LOADZ(17) LOADZ(18) LOADZ(19) LOADZ(20) LOADZ(21) LOADZ(22) LOADZ(23)
      LOADZ(24) LOADZ(25) LOADZ(26) LOADZ(27) LOADZ(28) LOADZ(29) LOADZ(30) LOADZ(31)
      LOADK(1) LOADK(2) LOADK(3) LOADK(4) LOADK(5) LOADK(6) LOADK(7)
      "movl $1, (%[parked])\n\t"
      "1: pause\n\t cmpl $0, (%[go])\n\t je 1b\n\t"
      STOREZ(0) STOREZ(1) STOREZ(2) STOREZ(3) STOREZ(4) STOREZ(5) STOREZ(6) STOREZ(7)
      STOREZ(8) STOREZ(9) STOREZ(10) STOREZ(11) STOREZ(12) STOREZ(13) STOREZ(14) STOREZ(15)
      STOREZ(16) STOREZ(17) STOREZ(18) STOREZ(19) STOREZ(20) STOREZ(21) STOREZ(22) STOREZ(23)
      STOREZ(24) STOREZ(25) STOREZ(26) STOREZ(27) STOREZ(28) STOREZ(29) STOREZ(30) STOREZ(31)
      STOREK(1) STOREK(2) STOREK(3) STOREK(4) STOREK(5) STOREK(6) STOREK(7)
      "vzeroupper\n\t"
      :
      : [in] "r"(in), [out] "r"(out), [kin] "r"(k_in), [kout] "r"(k_out), [go] "r"(&g_go),
        [parked] "r"(&g_parked[2])
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",
        "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30",
        "xmm31", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "memory", "cc");
#undef LOADZ
#undef STOREZ
#undef LOADK
#undef STOREK
  ptrdiff_t bad = wl_check_pattern(out, sizeof out, 303);
  if (bad >= 0) wl_fail("AVX-512: zmm%td byte %td changed", bad / 64, bad % 64);
  if (memcmp(k_in, k_out, sizeof k_in) != 0) wl_fail("AVX-512: opmask registers changed");
  CheckControl("AVX-512 thread", FE_DOWNWARD, 0x0300);
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  void* (*bodies[3])(void*) = {SseThread, HaveAvx() ? AvxThread : NULL,
                               HaveAvx512() ? Avx512Thread : NULL};
  pthread_t threads[3];
  for (int i = 0; i < 3; i++) {
    if (!bodies[i]) {
      g_parked[i] = 1;
      continue;
    }
    int rc = pthread_create(&threads[i], NULL, bodies[i], NULL);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  // The main thread keeps the default control state; it must not pick up any thread's.
  for (int i = 0; i < 3; i++) {
    while (!g_parked[i]) wl_sleep_ms(1);
  }
  wl_signal_ready();
  wl_wait_go();
  g_go = 1;
  for (int i = 0; i < 3; i++) {
    if (bodies[i]) pthread_join(threads[i], NULL);
  }
  CheckControl("main thread", FE_TONEAREST, 0x0300);
  wl_pass();
}
