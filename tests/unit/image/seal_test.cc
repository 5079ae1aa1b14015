// The image seal (engine/image/seal.h) on checkpoint-shaped directories: what it accepts, and
// every way of changing a sealed checkpoint without the key that it must refuse.

#include "engine/image/seal.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/image/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace cairn::image {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void Write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
  ::chmod(p.c_str(), 0600);
}

class SealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::umask(077);
    auto k = ImageKey::LoadOrCreate(tmp_.path() + "/keys/image.key");
    ASSERT_TRUE(k.ok()) << k.status();
    key_ = *k;
  }
  // A directory shaped like a checkpoint: the three files with distinct contents, sealed.
  std::string Checkpoint(const std::string& name, char fill) {
    std::string dir = tmp_.path() + "/" + name;
    fs::create_directory(dir);
    ::chmod(dir.c_str(), 0700);
    Write(dir + "/" + kMetaFile, std::string(300, fill));
    Write(dir + "/" + kFilesFile, std::string(4096, fill + 1));
    Write(dir + "/" + kPagesFile, std::string(3 << 20, fill + 2));  // spans chunks of the MAC's reads
    absl::Status s = SealImage(dir, key_);
    EXPECT_TRUE(s.ok()) << s;
    return dir;
  }
  cairn::testing::TempDir tmp_;
  ImageKey key_;
};

TEST_F(SealTest, ASealedCheckpointPassesAndTheKeyIsKept) {
  std::string dir = Checkpoint("a", 'a');
  EXPECT_TRUE(CheckSeal(dir, key_).ok());
  auto again = ImageKey::LoadOrCreate(tmp_.path() + "/keys/image.key");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), key_.id()) << "a second LoadOrCreate made a new key";
  struct stat st {};
  ASSERT_EQ(::stat((tmp_.path() + "/keys/image.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(SealTest, AnyChangedByteOfAnyFileIsRefusedNamingTheFile) {
  for (const char* f : {kMetaFile, kFilesFile, kPagesFile}) {
    std::string dir = Checkpoint(std::string("changed-") + f, 'c');
    std::string bytes = Read(dir + "/" + f);
    bytes[bytes.size() / 2] ^= 1;
    Write(dir + "/" + f, bytes);
    absl::Status s = CheckSeal(dir, key_);
    EXPECT_TRUE(absl::IsDataLoss(s)) << f << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(std::string(f) + " does not match its seal")) << s;
  }
}

TEST_F(SealTest, FilesOfTwoSealedCheckpointsCannotBeMixed) {
  std::string a = Checkpoint("mix-a", 'a');
  std::string b = Checkpoint("mix-b", 'b');
  // Same sizes, each sealed with the same key: B's pages under A's seal.
  fs::copy_file(b + "/" + kPagesFile, a + "/" + kPagesFile, fs::copy_options::overwrite_existing);
  absl::Status s = CheckSeal(a, key_);
  EXPECT_THAT(s.message(), HasSubstr("pages.img does not match its seal")) << s;
  // Or B's seal over A's files.
  std::string c = Checkpoint("mix-c", 'a');
  fs::copy_file(b + "/" + kSealFile, c + "/" + kSealFile, fs::copy_options::overwrite_existing);
  EXPECT_FALSE(CheckSeal(c, key_).ok());
}

TEST_F(SealTest, UnsealedForeignAndBadSealsAreRefusedWithWhatToDo) {
  std::string dir = Checkpoint("plain", 'p');
  auto other = ImageKey::LoadOrCreate(tmp_.path() + "/other.key");
  ASSERT_TRUE(other.ok());
  absl::Status foreign = CheckSeal(dir, *other);
  EXPECT_TRUE(absl::IsPermissionDenied(foreign)) << foreign;
  EXPECT_THAT(foreign.message(), HasSubstr("sealed with image key " + key_.id()));
  EXPECT_THAT(foreign.message(), HasSubstr("--trust-unsigned"));

  std::string seal = Read(dir + "/" + kSealFile);
  Write(dir + "/" + kSealFile, seal.substr(0, seal.size() / 2));
  EXPECT_TRUE(absl::IsDataLoss(CheckSeal(dir, key_))) << CheckSeal(dir, key_);

  fs::remove(dir + "/" + kSealFile);
  absl::Status unsealed = CheckSeal(dir, key_);
  EXPECT_TRUE(absl::IsFailedPrecondition(unsealed)) << unsealed;
  EXPECT_THAT(unsealed.message(), HasSubstr("is not sealed"));
}

TEST_F(SealTest, FilesOthersCouldWriteAreRefused) {
  std::string dir = Checkpoint("writable", 'w');
  ::chmod((dir + "/" + kPagesFile).c_str(), 0620);
  absl::Status s = CheckSeal(dir, key_);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("pages.img"));
  ::chmod((dir + "/" + kPagesFile).c_str(), 0600);
  ::chmod(dir.c_str(), 0777);
  EXPECT_TRUE(absl::IsPermissionDenied(CheckSeal(dir, key_)));
}

// cairnd's job spec beside a stored checkpoint (it names the job's user): sealed on its own,
// bound to that checkpoint.
TEST_F(SealTest, ASideFileComesBackOnlyAsSealedForItsCheckpoint) {
  std::string a = Checkpoint("a", 'a');
  std::string b = Checkpoint("b", 'b');
  Write(a + "/spec", "user nobody");
  Write(b + "/spec", "user root!!");
  ASSERT_TRUE(SealSideFile(a, "spec", key_).ok());
  ASSERT_TRUE(SealSideFile(b, "spec", key_).ok());
  absl::StatusOr<std::string> got = ReadSealedSideFile(a, "spec", key_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "user nobody");

  // Changed, same length.
  Write(a + "/spec", "user root!!");
  got = ReadSealedSideFile(a, "spec", key_);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("does not match its seal"));

  // Another checkpoint's spec with its seal, moved over.
  fs::copy_file(b + "/spec", a + "/spec", fs::copy_options::overwrite_existing);
  fs::copy_file(b + "/spec.seal", a + "/spec.seal", fs::copy_options::overwrite_existing);
  got = ReadSealedSideFile(a, "spec", key_);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("belongs to another checkpoint"));

  // No seal at all; another key.
  fs::remove(a + "/spec.seal");
  got = ReadSealedSideFile(a, "spec", key_);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("is not sealed"));
  auto other = ImageKey::LoadOrCreate(tmp_.path() + "/keys/other.key");
  ASSERT_TRUE(other.ok());
  got = ReadSealedSideFile(b, "spec", *other);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("not with this node's key"));
}

TEST_F(SealTest, AKeyFileOthersCanReadIsRefused) {
  std::string path = tmp_.path() + "/loose.key";
  Write(path, std::string(64, 'a') + "\n");
  ::chmod(path.c_str(), 0644);
  auto k = ImageKey::Load(path);
  EXPECT_TRUE(absl::IsPermissionDenied(k.status())) << k.status();
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(ImageKey::Load(path).ok());
  Write(path, "not a key\n");
  EXPECT_TRUE(absl::IsInvalidArgument(ImageKey::Load(path).status()));
}

}  // namespace
}  // namespace cairn::image
