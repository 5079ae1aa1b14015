#include "engine/inject/trampoline.h"

#include <elf.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/inject/injector.h"
#include "engine/proc/maps.h"

namespace cairn::inject {
namespace {

// Offsets in the trampoline.
constexpr size_t kSyscallOff = 0;  // syscall ; then asleep
constexpr size_t kLoopOff = 16;    // the batch loop (batch.h), then done=1 ; wake ; asleep

// The batch loop, with the table's address in r12 and the number of rows in r13:
//   loop: mov rax,[r12]; mov rdi,[r12+8]; mov rsi,[r12+16]; mov rdx,[r12+24]
//         mov r10,[r12+32]; mov r8,[r12+40]; mov r9,[r12+48]; syscall
//         mov [r12+56],rax; add r12,64; dec r13; jnz loop
//         mov qword [r12],1          (the row past the table: every call done)
//         futex(r12, FUTEX_WAKE, 1)  (wakes a tracer waiting on it through a shared mapping)
//   wait: futex(r12, FUTEX_WAIT, 1)  (asleep; only PTRACE_INTERRUPT ends it: signals are
//         jmp wait                     blocked for the call)
constexpr unsigned char kLoop[] = {
    0x49, 0x8b, 0x04, 0x24,                          // mov rax, [r12]
    0x49, 0x8b, 0x7c, 0x24, 0x08,                    // mov rdi, [r12+0x8]
    0x49, 0x8b, 0x74, 0x24, 0x10,                    // mov rsi, [r12+0x10]
    0x49, 0x8b, 0x54, 0x24, 0x18,                    // mov rdx, [r12+0x18]
    0x4d, 0x8b, 0x54, 0x24, 0x20,                    // mov r10, [r12+0x20]
    0x4d, 0x8b, 0x44, 0x24, 0x28,                    // mov r8, [r12+0x28]
    0x4d, 0x8b, 0x4c, 0x24, 0x30,                    // mov r9, [r12+0x30]
    0x0f, 0x05,                                      // syscall
    0x49, 0x89, 0x44, 0x24, 0x38,                    // mov [r12+0x38], rax
    0x49, 0x83, 0xc4, 0x40,                          // add r12, 0x40
    0x49, 0xff, 0xcd,                                // dec r13
    0x75, 0xce,                                      // jnz loop
    0x49, 0xc7, 0x04, 0x24, 0x01, 0x00, 0x00, 0x00,  // mov qword [r12], 1
    0x4c, 0x89, 0xe7,                                // mov rdi, r12
    0xbe, 0x01, 0x00, 0x00, 0x00,                    // mov esi, 1 (FUTEX_WAKE, shared)
    0xba, 0x01, 0x00, 0x00, 0x00,                    // mov edx, 1
    0xb8, 0xca, 0x00, 0x00, 0x00,                    // mov eax, 202 (futex)
    0x0f, 0x05,                                      // syscall
    0x31, 0xf6,                                      // xor esi, esi (FUTEX_WAIT, on the same word)
    0x4d, 0x31, 0xd2,                                // xor r10, r10 (no timeout)
    0xb8, 0xca, 0x00, 0x00, 0x00,                    // wait: mov eax, 202 (futex)
    0x0f, 0x05,                                      // syscall
    0xeb, 0xf7,                                      // jmp wait
};
constexpr size_t kLoopWaitOff = kLoopOff + sizeof kLoop - 2;
constexpr size_t kLoopDoneOff = kLoopOff + 50 + 8;  // past the loop and its done store
static_assert(kLoopOff + sizeof kLoop <= Trampoline::kSize);

std::string Code() {
  std::string code(Trampoline::kSize, '\0');
  // syscall ; wait: pause() ; jmp wait   (pause: see the loop's wait)
  const unsigned char one[] = {0x0f, 0x05, 0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7};
  std::memcpy(code.data() + kSyscallOff, one, sizeof one);
  std::memcpy(code.data() + kLoopOff, kLoop, sizeof kLoop);
  return code;
}

// The offset of the first byte past the ELF image at the start of `image` (a vDSO as it is
// mapped): the end of its program headers' file contents, sections and section headers.
absl::StatusOr<size_t> ElfImageEnd(const std::string& image) {
  if (image.size() < sizeof(Elf64_Ehdr) || std::memcmp(image.data(), ELFMAG, SELFMAG) != 0 ||
      image[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError("not an ELF64 image");
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, image.data(), sizeof eh);
  size_t end = sizeof eh;
  auto extend = [&](uint64_t off, uint64_t len) -> bool {
    if (off > image.size() || len > image.size() - off) return false;
    end = std::max<size_t>(end, off + len);
    return true;
  };
  if (!extend(eh.e_phoff, uint64_t{eh.e_phnum} * eh.e_phentsize) ||
      !extend(eh.e_shoff, uint64_t{eh.e_shnum} * eh.e_shentsize)) {
    return absl::InvalidArgumentError("ELF headers past the end of the image");
  }
  for (unsigned i = 0; i < eh.e_phnum && eh.e_phentsize >= sizeof(Elf64_Phdr); ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, image.data() + eh.e_phoff + i * eh.e_phentsize, sizeof ph);
    if (!extend(ph.p_offset, ph.p_filesz)) return absl::InvalidArgumentError("ELF segment past the end of the image");
  }
  for (unsigned i = 0; i < eh.e_shnum && eh.e_shentsize >= sizeof(Elf64_Shdr); ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, image.data() + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
    if (sh.sh_type == SHT_NOBITS) continue;
    if (!extend(sh.sh_offset, sh.sh_size)) return absl::InvalidArgumentError("ELF section past the end of the image");
  }
  return end;
}

// The home's bytes that matter and where the trampoline goes in them: the whole vDSO (the
// code goes past its ELF image), or a file mapping's last kSize bytes.
struct Tail {
  std::string bytes;
  uint64_t base = 0;     // the address of bytes[0]
  size_t image_end = 0;  // the vDSO's ELF image's end (vDSO only)
  size_t at = 0;         // where the code goes, from base
};

absl::StatusOr<Tail> ReadTail(pid_t pid, const TrampolineHome& home) {
  Tail t;
  if (!home.vdso) {
    if (home.end - home.start < Trampoline::kSize) {
      return absl::FailedPreconditionError(absl::StrFormat("pid %d: its area at %#x is too small to inject from",
                                                           pid, home.start));
    }
    t.base = home.end - Trampoline::kSize;
    t.bytes.resize(Trampoline::kSize);
    RETURN_IF_ERROR(ReadRemote(pid, t.base, t.bytes.data(), t.bytes.size()));
    return t;
  }
  t.base = home.start;
  t.bytes.resize(home.end - home.start);
  RETURN_IF_ERROR(ReadRemote(pid, home.start, t.bytes.data(), t.bytes.size()));
  absl::StatusOr<size_t> end = ElfImageEnd(t.bytes);
  if (!end.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat("pid %d: its vDSO at %#x is not the kernel's (%s)", pid,
                                                         home.start, end.status().message()));
  }
  t.image_end = *end;
  t.at = (*end + 15) & ~size_t{15};
  if (t.at + Trampoline::kSize > t.bytes.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "pid %d: its vDSO has no free %zu bytes past its image (it ends at %zu of %zu); cannot inject safely", pid,
        Trampoline::kSize, t.image_end, t.bytes.size()));
  }
  return t;
}

}  // namespace

absl::StatusOr<TrampolineHome> FindTrampolineHome(pid_t pid) {
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadMaps(pid));
  for (const proc::MapEntry& m : maps) {
    if (m.path == "[vdso]") return TrampolineHome{m.start, m.end, true};
  }
  const proc::MapEntry* last_text = nullptr;
  for (const proc::MapEntry& m : maps) {
    // A file's text: not a memfd or deleted file (whose content the process may change), and
    // its last page backed by the file (a page past its end cannot be read).
    bool text = (m.prot & PROT_EXEC) && !m.shared && !m.path.empty() && m.path[0] == '/' &&
                !absl::StartsWith(m.path, "/memfd:") && !absl::EndsWith(m.path, " (deleted)");
    struct stat st {};
    std::string file = absl::StrFormat("/proc/%d/map_files/%x-%x", pid, m.start, m.end);
    if (text && ::stat(file.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > m.offset + (m.end - m.start) - 4096) {
      last_text = &m;
    }
  }
  if (last_text == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " has no vDSO (it unmapped it) and no private executable file mapping to inject its calls from"));
  }
  return TrampolineHome{last_text->start, last_text->end, false};
}

absl::StatusOr<uint64_t> Trampoline::Locate(pid_t pid, const TrampolineHome& home) {
  ASSIGN_OR_RETURN(Tail t, ReadTail(pid, home));
  return t.base + t.at;
}

absl::StatusOr<Trampoline> Trampoline::Install(pid_t pid, const TrampolineHome& home) {
  ASSIGN_OR_RETURN(Tail t, ReadTail(pid, home));
  // Zeros, or this very code left by a dumper whose guardian died too (the tail was zeros).
  std::string code = Code();
  if (t.bytes.compare(t.at, kSize, code) != 0 &&
      std::any_of(t.bytes.begin() + static_cast<long>(t.at), t.bytes.begin() + static_cast<long>(t.at + kSize),
                  [](char c) { return c != 0; })) {
    if (!home.vdso) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "pid %d has no vDSO (it unmapped it), and the last %zu bytes of its executable area at %#x-%#x are not "
          "free; cannot inject safely",
          pid, kSize, home.start, home.end));
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "pid %d: its vDSO's %zu bytes past its image (at %zu of %zu) are not free; cannot inject safely", pid, kSize,
        t.image_end, t.bytes.size()));
  }
  Trampoline tramp(pid, t.base + t.at);
  RETURN_IF_ERROR(Annotate(WriteRemote(pid, tramp.addr_, code.data(), kSize),
                           "write the injection trampoline through /proc/PID/mem (a kernel booted with "
                           "proc_mem.force_override=never refuses it)"));
  return tramp;
}

Trampoline& Trampoline::operator=(Trampoline&& other) noexcept {
  pid_ = other.pid_;
  addr_ = other.addr_;
  other.addr_ = 0;
  return *this;
}

uint64_t Trampoline::batch_wait() const { return addr_ + kLoopWaitOff; }
uint64_t Trampoline::batch_done() const { return addr_ + kLoopDoneOff; }

absl::Status Trampoline::ClearIfOurs(pid_t pid, uint64_t addr) {
  std::string now(kSize, '\0');
  RETURN_IF_ERROR(ReadRemote(pid, addr, now.data(), now.size()));
  std::string code = Code();
  for (size_t i = 0; i < kSize; ++i) {
    if (now[i] != 0 && now[i] != code[i]) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "pid %d: the %zu bytes at %#x are not (part of) the injection trampoline: left as they are", pid, kSize,
          addr));
    }
  }
  return Adopt(pid, addr).Remove();
}

absl::Status Trampoline::Remove() {
  if (addr_ == 0) return absl::OkStatus();
  uint64_t addr = addr_;
  addr_ = 0;
  std::string zeros(kSize, '\0');
  return Annotate(WriteRemote(pid_, addr, zeros.data(), zeros.size()), "remove the injection trampoline");
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> VdsoRange(pid_t pid) {
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadMaps(pid));
  for (const proc::MapEntry& m : maps) {
    if (m.path == "[vdso]") return std::make_pair(m.start, m.end);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "pid ", pid, " has no vDSO (it unmapped it); cairn injects its calls from the vDSO and cannot checkpoint it"));
}

}  // namespace cairn::inject
