#include "engine/machine/vdso.h"

#include <elf.h>
#include <sys/auxv.h>
#include <sys/syscall.h>

#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/proc/maps.h"

namespace cairn::machine {
namespace {

template <typename T>
bool ReadAt(const std::string& image, uint64_t off, T* out) {
  if (off > image.size() || image.size() - off < sizeof(T)) return false;
  std::memcpy(out, image.data() + off, sizeof(T));
  return true;
}

std::string Read() {
  uint64_t base = ::getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return {};
  auto maps = proc::ReadMaps(::getpid());
  if (!maps.ok()) return {};
  for (const proc::MapEntry& m : *maps) {
    if (m.path == "[vdso]" && m.start == base) return std::string(reinterpret_cast<const char*>(base), m.end - m.start);
  }
  return {};
}

// A jump from `from` to `to` in at most `room` bytes: rel32 when in reach, else an
// absolute indirect jump through the 8 bytes that follow it.
absl::StatusOr<std::string> Jump(uint64_t from, uint64_t to, uint64_t room) {
  int64_t rel = static_cast<int64_t>(to) - static_cast<int64_t>(from + 5);
  if (rel >= INT32_MIN && rel <= INT32_MAX && room >= 5) {
    std::string j(5, '\0');
    j[0] = static_cast<char>(0xe9);
    int32_t r = static_cast<int32_t>(rel);
    std::memcpy(j.data() + 1, &r, 4);
    return j;
  }
  if (room >= 14) {
    std::string j = {'\xff', '\x25', 0, 0, 0, 0};  // jmp *0(%rip)
    j.append(reinterpret_cast<const char*>(&to), 8);
    return j;
  }
  return absl::FailedPreconditionError("too short for a jump");
}

// The system call standing in for a vDSO function this kernel's vDSO lacks (same arguments).
long FallbackSyscall(const std::string& name) {
  std::string n = name;
  if (absl::StartsWith(n, "__vdso_")) n = n.substr(7);
  if (n == "clock_gettime") return SYS_clock_gettime;
  if (n == "gettimeofday") return SYS_gettimeofday;
  if (n == "time") return SYS_time;
  if (n == "getcpu") return SYS_getcpu;
  if (n == "clock_getres") return SYS_clock_getres;
  // getrandom(buffer, len, flags, opaque_state, opaque_len) (Linux 6.11): the system call takes
  // the first three, and gives what the vDSO gives (the vDSO itself falls back to it when its
  // state cannot be used). The caller's query of the state's size was made at start-up, on the
  // kernel that had it.
  if (n == "getrandom") return SYS_getrandom;
  return -1;
}

// A vDSO function only a program holding what cairn does not checkpoint can use: entering an
// SGX enclave (its pages are a mapping of /dev/sgx_enclave, a device a dump refuses). With no
// enclave there is nothing to enter, and its entry returns -EINVAL, as the function does for
// a call it cannot carry out.
bool OnlyForWhatIsNotCheckpointed(const std::string& name) {
  return name == "__vdso_sgx_enter_enclave" || name == "sgx_enter_enclave";
}

}  // namespace

const std::string& ThisVdso() {
  static const std::string vdso = Read();
  return vdso;
}

absl::StatusOr<std::map<std::string, VdsoSymbol>> VdsoFunctions(const std::string& image) {
  auto bad = [](const char* what) { return absl::DataLossError(absl::StrCat("not a vDSO image: ", what)); };
  Elf64_Ehdr eh;
  if (!ReadAt(image, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return bad("no 64-bit ELF header");
  }
  // The section headers: the kernel's vDSO images keep them.
  for (int i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (!ReadAt(image, eh.e_shoff + static_cast<uint64_t>(i) * eh.e_shentsize, &sh)) return bad("section header");
    if (sh.sh_type != SHT_DYNSYM) continue;
    Elf64_Shdr strtab;
    if (!ReadAt(image, eh.e_shoff + static_cast<uint64_t>(sh.sh_link) * eh.e_shentsize, &strtab)) return bad("strtab");
    std::map<std::string, VdsoSymbol> out;
    for (uint64_t off = sh.sh_offset; off + sizeof(Elf64_Sym) <= sh.sh_offset + sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym s;
      if (!ReadAt(image, off, &s)) return bad("symbol");
      if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
      uint64_t name_at = strtab.sh_offset + s.st_name;
      if (name_at >= image.size()) return bad("symbol name");
      std::string name(image.data() + name_at, strnlen(image.data() + name_at, image.size() - name_at));
      if (s.st_value + s.st_size > image.size()) return bad("symbol past the image");
      out[name] = {s.st_value, s.st_size};
    }
    return out;
  }
  return bad("no dynamic symbol table");
}

absl::StatusOr<std::string> VdsoProxy(const std::string& old_image, uint64_t old_base, const std::string& new_image,
                                      uint64_t new_base) {
  ASSIGN_OR_RETURN(auto old_fns, VdsoFunctions(old_image));
  ASSIGN_OR_RETURN(auto new_fns, VdsoFunctions(new_image));
  std::string out = old_image;
  for (const auto& [name, sym] : old_fns) {
    std::string code;
    if (auto it = new_fns.find(name); it != new_fns.end()) {
      auto j = Jump(old_base + sym.offset, new_base + it->second.offset, sym.size);
      if (!j.ok()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the checkpoint's vDSO function %s is %u bytes long, too short to be redirected to this kernel's", name,
            sym.size));
      }
      code = *j;
    } else if (long nr = FallbackSyscall(name); nr >= 0 && sym.size >= 8) {
      code = {'\xb8', 0, 0, 0, 0, '\x0f', '\x05', '\xc3'};  // mov $nr, %eax; syscall; ret
      int32_t n = static_cast<int32_t>(nr);
      std::memcpy(code.data() + 1, &n, 4);
    } else if (OnlyForWhatIsNotCheckpointed(name) && sym.size >= 6) {
      code = {'\xb8', '\xea', '\xff', '\xff', '\xff', '\xc3'};  // mov $-EINVAL, %eax; ret
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint's vDSO has a function ", name, " that this kernel's vDSO lacks: restore it on a machine "
          "whose kernel has it (the same kernel version or newer)"));
    }
    std::memcpy(out.data() + sym.offset, code.data(), code.size());
  }
  return out;
}

}  // namespace cairn::machine
