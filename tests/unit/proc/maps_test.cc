#include "engine/proc/maps.h"

#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::proc {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(ParseMapsLineTest, FileBackedPrivate) {
  auto e = ParseMapsLine(
      "7f1c2a000000-7f1c2a021000 r-xp 00002000 fd:01 1234567                    /usr/lib/libc.so.6");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->start, 0x7f1c2a000000u);
  EXPECT_EQ(e->end, 0x7f1c2a021000u);
  EXPECT_EQ(e->size(), 0x21000u);
  EXPECT_EQ(e->prot, static_cast<uint32_t>(PROT_READ | PROT_EXEC));
  EXPECT_FALSE(e->shared);
  EXPECT_EQ(e->offset, 0x2000u);
  EXPECT_EQ(e->dev_major, 0xfdu);
  EXPECT_EQ(e->dev_minor, 0x01u);
  EXPECT_EQ(e->inode, 1234567u);
  EXPECT_EQ(e->path, "/usr/lib/libc.so.6");
  EXPECT_THAT(e->vm_flags, IsEmpty());
}

TEST(ParseMapsLineTest, PathWithSpacesAndColonIsKeptWhole) {
  auto e = ParseMapsLine("00400000-00452000 r--p 00000000 103:02 98765  /home/a user/my lib: v2.so");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->dev_major, 0x103u);
  EXPECT_EQ(e->dev_minor, 0x02u);
  EXPECT_EQ(e->prot, static_cast<uint32_t>(PROT_READ));
  EXPECT_EQ(e->path, "/home/a user/my lib: v2.so");
}

TEST(ParseMapsLineTest, DeletedFileKeepsSuffix) {
  auto e = ParseMapsLine("7f0000001000-7f0000003000 rw-s 00001000 00:05 4242 /dev/shm/buf x (deleted)");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->shared);
  EXPECT_EQ(e->prot, static_cast<uint32_t>(PROT_READ | PROT_WRITE));
  EXPECT_EQ(e->offset, 0x1000u);
  EXPECT_EQ(e->inode, 4242u);
  EXPECT_EQ(e->path, "/dev/shm/buf x (deleted)");
}

TEST(ParseMapsLineTest, PseudoPaths) {
  auto heap = ParseMapsLine("55d4a8a00000-55d4a8a21000 rw-p 00000000 00:00 0                          [heap]");
  ASSERT_TRUE(heap.ok()) << heap.status();
  EXPECT_EQ(heap->path, "[heap]");
  EXPECT_EQ(heap->inode, 0u);

  auto vdso = ParseMapsLine("7ffd5c9f0000-7ffd5c9f2000 r-xp 00000000 00:00 0                          [vdso]");
  ASSERT_TRUE(vdso.ok()) << vdso.status();
  EXPECT_EQ(vdso->path, "[vdso]");
  EXPECT_EQ(vdso->prot, static_cast<uint32_t>(PROT_READ | PROT_EXEC));

  auto vsys = ParseMapsLine("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]");
  ASSERT_TRUE(vsys.ok()) << vsys.status();
  EXPECT_EQ(vsys->start, 0xffffffffff600000u);
  EXPECT_EQ(vsys->end, 0xffffffffff601000u);
  EXPECT_EQ(vsys->prot, static_cast<uint32_t>(PROT_EXEC));
}

TEST(ParseMapsLineTest, AnonymousWithoutPath) {
  // The kernel pads anonymous lines with trailing spaces on some versions, none on others.
  for (const char* line : {"7f1c2a300000-7f1c2a400000 ---p 00000000 00:00 0",
                           "7f1c2a300000-7f1c2a400000 ---p 00000000 00:00 0                    "}) {
    SCOPED_TRACE(line);
    auto e = ParseMapsLine(line);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->path, "");
    EXPECT_EQ(e->prot, 0u);
    EXPECT_FALSE(e->shared);
    EXPECT_EQ(e->size(), 0x100000u);
  }
}

TEST(ParseMapsLineTest, MalformedLinesAreDataLoss) {
  const char* bad[] = {
      "",
      "garbage",
      "7f00-7f10 rw-p",                          // too few fields
      "7f00 rw-p 00000000 00:00 0",              // no dash in the range
      "zz00-7f10 rw-p 00000000 00:00 0",         // not hex
      "7f00-7f10 rw-pq 00000000 00:00 0",        // perms not 4 chars
      "7f00-7f10 rw-p 0000g000 00:00 0",         // offset not hex
      "7f00-7f10 rw-p 00000000 0000 0",          // device without colon
      "7f00-7f10 rw-p 00000000 00:00 12ab",      // inode not decimal
      "Rss:                   4 kB",
  };
  for (const char* line : bad) {
    SCOPED_TRACE(line);
    auto e = ParseMapsLine(line);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
  }
}

constexpr char kSmaps[] =
    "00400000-00401000 r-xp 00000000 08:01 131 /opt/my app/bin\n"
    "Size:                  4 kB\n"
    "KernelPageSize:        4 kB\n"
    "Rss:                   4 kB\n"
    "THPeligible:    0\n"
    "VmFlags: rd ex mr mw me dw \n"
    "01a2b000-01a4c000 rw-p 00000000 00:00 0                                  [heap]\n"
    "Size:                132 kB\n"
    "Anonymous:             8 kB\n"
    "VmFlags: rd wr mr mw me ac \n"
    "7f0000000000-7f0000010000 rw-p 00000000 00:00 0 \n"
    "Size:                 64 kB\n"
    "ProtectionKey:         0\n"
    "VmFlags: rd wr mr mw me ac dd\n"
    "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]\n"
    "Size:                132 kB\n"
    "VmFlags: rd wr mr mw me gd ac\n";

TEST(ParseSmapsTest, AreasWithVmFlags) {
  auto maps = ParseSmaps(kSmaps);
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_EQ(maps->size(), 4u);

  const MapEntry& bin = (*maps)[0];
  EXPECT_EQ(bin.path, "/opt/my app/bin");
  EXPECT_EQ(bin.dev_major, 8u);
  EXPECT_EQ(bin.dev_minor, 1u);
  EXPECT_THAT(bin.vm_flags, ElementsAre("rd", "ex", "mr", "mw", "me", "dw"));
  EXPECT_TRUE(bin.HasFlag("ex"));
  EXPECT_FALSE(bin.HasFlag("wr"));

  EXPECT_EQ((*maps)[1].path, "[heap]");
  EXPECT_EQ((*maps)[1].start, 0x01a2b000u);
  EXPECT_THAT((*maps)[1].vm_flags, ElementsAre("rd", "wr", "mr", "mw", "me", "ac"));

  EXPECT_EQ((*maps)[2].path, "");
  EXPECT_TRUE((*maps)[2].HasFlag("dd"));
  EXPECT_FALSE((*maps)[2].HasFlag("d"));  // whole mnemonics, not prefixes

  EXPECT_EQ((*maps)[3].path, "[stack]");
  EXPECT_TRUE((*maps)[3].HasFlag("gd"));
  EXPECT_EQ((*maps)[3].vm_flags.size(), 7u);
}

TEST(ParseSmapsTest, PlainMapsTextHasNoFlags) {
  auto maps = ParseSmaps(
      "00400000-00401000 r-xp 00000000 08:01 131 /bin/true\n"
      "7ffd5c9f0000-7ffd5c9f2000 r-xp 00000000 00:00 0  [vdso]\n");
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_EQ(maps->size(), 2u);
  EXPECT_EQ((*maps)[1].path, "[vdso]");
  EXPECT_THAT((*maps)[0].vm_flags, IsEmpty());
  EXPECT_THAT((*maps)[1].vm_flags, IsEmpty());
}

TEST(ParseSmapsTest, EmptyTextIsNoAreas) {
  auto maps = ParseSmaps("");
  ASSERT_TRUE(maps.ok()) << maps.status();
  EXPECT_THAT(*maps, IsEmpty());
}

TEST(ParseSmapsTest, VmFlagsBeforeAnyAreaIsDataLoss) {
  auto maps = ParseSmaps("VmFlags: rd wr\n00400000-00401000 r-xp 00000000 08:01 131 /bin/true\n");
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ParseSmapsTest, MalformedHeaderIsDataLoss) {
  auto maps = ParseSmaps(
      "00400000-00401000 r-xp 00000000 08:01 131 /bin/true\n"
      "Size: 4 kB\n"
      "00401000 r-xp 00000000 08:01 131 /bin/true\n");
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ReadSmapsTest, SelfHasStackAndOwnBinary) {
  int local = 0;
  const auto addr = reinterpret_cast<uint64_t>(&local);
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe);
  ASSERT_GT(n, 0);
  std::string exe_path(exe, static_cast<size_t>(n));

  auto maps = ReadSmaps(::getpid());
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_FALSE(maps->empty());

  const MapEntry* stack = nullptr;
  const MapEntry* text = nullptr;
  uint64_t prev_end = 0;
  for (const MapEntry& e : *maps) {
    EXPECT_LT(e.start, e.end);
    EXPECT_GE(e.start, prev_end) << "areas must be ascending and disjoint";
    prev_end = e.end;
    EXPECT_FALSE(e.vm_flags.empty()) << "smaps gives every area VmFlags: " << e.path;
    if (e.path == "[stack]") stack = &e;
    if (e.path == exe_path && (e.prot & PROT_EXEC) != 0) text = &e;
  }
  ASSERT_NE(stack, nullptr) << "no [stack] in own smaps";
  EXPECT_TRUE(stack->HasFlag("gd"));
  EXPECT_EQ(stack->prot, static_cast<uint32_t>(PROT_READ | PROT_WRITE));
  EXPECT_LE(stack->start, addr);  // the test body runs on the main thread's stack
  EXPECT_LT(addr, stack->end);

  ASSERT_NE(text, nullptr) << "no executable area of " << exe_path;
  EXPECT_NE(text->inode, 0u);
  // ParseSmaps is linked statically into this binary, so its code lies in one of those areas.
  const auto fn = reinterpret_cast<uint64_t>(&ParseSmaps);
  bool fn_in_exe = false;
  for (const MapEntry& e : *maps) {
    if (e.path == exe_path && e.start <= fn && fn < e.end) fn_in_exe = (e.prot & PROT_EXEC) != 0;
  }
  EXPECT_TRUE(fn_in_exe) << "ParseSmaps's code is not in an executable area of " << exe_path;
}

TEST(ReadSmapsTest, MissingProcessIsNotFound) {
  auto maps = ReadSmaps(INT_MAX);
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cairn::proc
