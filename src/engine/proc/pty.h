#pragma once
// Pseudo-terminal ioctls cairn uses, defined here because glibc's <termios.h> and the kernel's
// <asm/termbits.h> (which has struct termios2) cannot be included together.

#include <sys/ioctl.h>

#include <cstdint>

namespace cairn::proc {

// struct termios2 (x86-64): the terminal settings with arbitrary speeds.
struct Termios2 {
  uint32_t c_iflag, c_oflag, c_cflag, c_lflag;
  uint8_t c_line;
  uint8_t c_cc[19];
  uint32_t c_ispeed, c_ospeed;
};
static_assert(sizeof(Termios2) == 44);

// A container's terminals whose masters were its runtime's are made again on its fresh devpts
// with their numbers: those below this (a runtime's console is /dev/pts/0).
constexpr unsigned kMaxContainerTerminal = 64;

constexpr unsigned long kTcgets2 = _IOR('T', 0x2A, Termios2);
constexpr unsigned long kTcsets2 = _IOW('T', 0x2B, Termios2);

}  // namespace cairn::proc
