// The S3 client (src/daemon/storage/s3_client.h) against a real S3 server (s3rver) on loopback:
// put/get/list/delete, multipart uploads, errors that name what failed.

#include "daemon/storage/s3_client.h"

#include <filesystem>
#include <random>

#include "daemon_harness.h"
#include "s3rver.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using daemon::storage::S3Client;
using daemon::storage::S3Config;

class S3ClientTest : public CairnTest {
 protected:
  void SetUp() override {
    CairnTest::SetUp();
    if (std::string why = S3rver::Missing(); !why.empty()) GTEST_SKIP() << "no S3 server to test against: " << why;
    server_ = std::make_unique<S3rver>(temp_->path() + "/s3", "bkt");
    ASSERT_TRUE(server_->Start());
  }
  S3Config Config() const {
    S3Config c = server_->Config();
    c.part_bytes = 5 << 20;  // S3's smallest part
    return c;
  }
  // A file of `n` random bytes.
  std::string RandomFile(const std::string& name, size_t n) {
    std::string data(n, '\0');
    std::mt19937_64 rng(n);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = rng();
      std::memcpy(&data[i], &v, std::min<size_t>(8, n - i));
    }
    std::string path = temp_->path() + "/" + name;
    WriteFile(path, data);
    return path;
  }
  std::unique_ptr<S3rver> server_;
};

TEST_F(S3ClientTest, PutGetListDelete) {
  S3Client c(Config());
  std::string small = RandomFile("small", 12345);
  ASSERT_TRUE(c.PutFile("jobs/a/small", small).ok());
  ASSERT_TRUE(c.PutBytes("jobs/a/note", "hello").ok());
  ASSERT_TRUE(c.PutBytes("jobs/b/other", "x").ok());
  auto bytes = c.GetBytes("jobs/a/note");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "hello");
  std::string back = temp_->path() + "/small.back";
  ASSERT_TRUE(c.GetFile("jobs/a/small", back).ok());
  EXPECT_EQ(ReadFile(back), ReadFile(small));

  auto list = c.List("jobs/a/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "jobs/a/note");
  EXPECT_EQ((*list)[0].size, 5u);
  EXPECT_EQ((*list)[1].key, "jobs/a/small");
  EXPECT_EQ((*list)[1].size, 12345u);

  ASSERT_TRUE(c.Delete("jobs/a/note").ok());
  ASSERT_TRUE(c.Delete("jobs/a/note").ok()) << "deleting a missing object succeeds, as in S3";
  list = c.List("jobs/");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
  auto gone = c.GetBytes("jobs/a/note");
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_NE(gone.status().message().find("s3://bkt/jobs/a/note"), absl::string_view::npos) << gone.status();
}

TEST_F(S3ClientTest, MultipartUploadOfALargeFileRoundTrips) {
  S3Client c(Config());
  // 3 parts of 5 MiB and a short last one, sent 4 at a time.
  std::string big = RandomFile("big", (15 << 20) + 777);
  ASSERT_TRUE(c.PutFile("big", big).ok());
  auto list = c.List("big");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].size, (15u << 20) + 777);
  std::string back = temp_->path() + "/big.back";
  ASSERT_TRUE(c.GetFile("big", back).ok());
  EXPECT_TRUE(ReadFile(back) == ReadFile(big)) << "the multipart object differs from the file";
  EXPECT_EQ(server_->PendingUploads(), 0) << "the multipart upload was not completed";
}

TEST_F(S3ClientTest, ListFollowsContinuationTokens) {
  S3Client c(Config());
  // s3rver answers at most 1000 keys a page.
  for (int i = 0; i < 1003; ++i) ASSERT_TRUE(c.PutBytes("many/" + std::to_string(i), "v").ok());
  auto list = c.List("many/");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1003u);
}

TEST_F(S3ClientTest, ErrorsNameTheObjectAndTheCause) {
  S3Config wrong = Config();
  wrong.access_key = "NOT-A-KEY";
  S3Client bad(wrong);
  absl::Status st = bad.PutBytes("x", "y");
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_NE(st.message().find("InvalidAccessKeyId"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("credentials"), absl::string_view::npos) << st;

  // A failed multipart upload is aborted: nothing pending is left behind.
  std::string big = RandomFile("big", (11 << 20));
  S3Config nobucket = Config();
  nobucket.bucket = "no-such-bucket";
  st = S3Client(nobucket).PutFile("big", big);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("NoSuchBucket"), absl::string_view::npos) << st;

  S3Config closed = Config();
  closed.endpoint = "http://127.0.0.1:" + std::to_string(FreeTcpPort());
  closed.retries = 1;
  st = S3Client(closed).PutBytes("x", "y");
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find(closed.endpoint), absl::string_view::npos) << st;
  EXPECT_EQ(server_->PendingUploads(), 0);
}

}  // namespace
}  // namespace cairn::testing
