// The stored-checkpoint manifest (src/daemon/storage/manifest.h): what it records, what it refuses.

#include "daemon/storage/manifest.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using daemon::storage::Manifest;
using daemon::storage::ManifestOf;
using daemon::storage::VerifyDir;

TEST(ManifestTest, RecordsEveryFileAndChecksThemBack) {
  TempDir t;
  fs::create_directories(t / "ck/sub");
  WriteFile(t / "ck/checkpoint.meta", "meta");
  WriteFile(t / "ck/sub/pages", std::string(3 << 20, 'p'));
  WriteFile(t / "ck/cairn-manifest", "an old manifest is not part of itself");
  auto m = ManifestOf(t / "ck", "job", "job-1");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[0].path, "checkpoint.meta");
  EXPECT_EQ(m->files[1].path, "sub/pages");
  EXPECT_EQ(m->files[1].size, 3u << 20);

  auto back = Manifest::Parse(m->Serialize(), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Serialize(), m->Serialize());
  EXPECT_TRUE(VerifyDir(t / "ck", *back).ok());

  // One byte changed, one file too many, one missing: each refused, naming the file.
  WriteFile(t / "ck/checkpoint.meta", "meta!");
  absl::Status st = VerifyDir(t / "ck", *back);
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("checkpoint.meta"), absl::string_view::npos) << st;
  WriteFile(t / "ck/checkpoint.meta", "meta");
  WriteFile(t / "ck/stray", "x");
  st = VerifyDir(t / "ck", *back);
  EXPECT_NE(st.message().find("stray"), absl::string_view::npos) << st;
  fs::remove(t / "ck/stray");
  fs::remove(t / "ck/sub/pages");
  EXPECT_FALSE(VerifyDir(t / "ck", *back).ok());
}

TEST(ManifestTest, RefusesWhatIsNotAManifest) {
  EXPECT_FALSE(Manifest::Parse("", "m").ok());
  EXPECT_FALSE(Manifest::Parse("hello\n", "m").ok());
  EXPECT_FALSE(Manifest::Parse("cairn-checkpoint-manifest 1\nid x\n", "m").ok()) << "no job";
  std::string head = "cairn-checkpoint-manifest 1\njob j\nid x\n";
  EXPECT_TRUE(Manifest::Parse(head + "file 3 00000000000000ff a/b\n", "m").ok());
  EXPECT_FALSE(Manifest::Parse(head + "file 3 00000000000000ff ../etc/passwd\n", "m").ok()) << "escapes the directory";
  EXPECT_FALSE(Manifest::Parse(head + "file 3 00000000000000ff /etc/passwd\n", "m").ok()) << "absolute";
  EXPECT_FALSE(Manifest::Parse(head + "file x 00000000000000ff a\n", "m").ok()) << "bad size";
  auto st = Manifest::Parse("junk\n", "s3://b/k/cairn-manifest").status();
  EXPECT_NE(st.message().find("s3://b/k/cairn-manifest"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace cairn::testing
