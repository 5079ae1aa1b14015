#include "daemon/storage/s3_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"

namespace cairn::daemon::storage {
namespace {

// libcurl 7.75 brought CURLOPT_AWS_SIGV4.
static_assert(LIBCURL_VERSION_NUM >= 0x074b00, "libcurl >= 7.75 is needed for CURLOPT_AWS_SIGV4");

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The text between <tag> and </tag>, from `from`; npos when absent.
std::string XmlField(const std::string& xml, const std::string& tag, size_t* from = nullptr) {
  size_t start = from ? *from : 0;
  std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t a = xml.find(open, start);
  if (a == std::string::npos) {
    if (from) *from = std::string::npos;
    return "";
  }
  a += open.size();
  size_t b = xml.find(close, a);
  if (b == std::string::npos) {
    if (from) *from = std::string::npos;
    return "";
  }
  if (from) *from = b + close.size();
  return absl::StrReplaceAll(xml.substr(a, b - a),
                             {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}});
}

struct ReadCtx {
  int fd = -1;
  const std::string* data = nullptr;
  uint64_t offset = 0, left = 0;
  bool failed = false;
};

size_t ReadCallback(char* buf, size_t size, size_t n, void* p) {
  auto* r = static_cast<ReadCtx*>(p);
  size_t want = static_cast<size_t>(std::min<uint64_t>(size * n, r->left));
  if (want == 0) return 0;
  if (r->data) {
    std::memcpy(buf, r->data->data() + r->offset, want);
  } else {
    ssize_t got = ::pread(r->fd, buf, want, static_cast<off_t>(r->offset));
    if (got <= 0) {
      r->failed = true;
      return CURL_READFUNC_ABORT;
    }
    want = static_cast<size_t>(got);
  }
  r->offset += want;
  r->left -= want;
  return want;
}

struct WriteCtx {
  int fd = -1;             // the body of a 2xx answer goes here when set
  std::string* body = nullptr;
  CURL* curl = nullptr;
  bool failed = false;
};

size_t WriteCallback(char* buf, size_t size, size_t n, void* p) {
  auto* w = static_cast<WriteCtx*>(p);
  size_t len = size * n;
  long code = 0;
  curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &code);
  if (w->fd >= 0 && code >= 200 && code < 300) {
    if (!WriteAll(w->fd, absl::string_view(buf, len), "download").ok()) {
      w->failed = true;
      return 0;
    }
    return len;
  }
  if (w->body->size() < (1u << 20) || w->fd < 0) w->body->append(buf, len);
  return len;
}

// Keeps the ETag header (a multipart part's name in the final list).
size_t HeaderCallback(char* buf, size_t size, size_t n, void* p) {
  size_t len = size * n;
  absl::string_view h(buf, len);
  if (h.size() > 5 && absl::EqualsIgnoreCase(h.substr(0, 5), "etag:")) {
    *static_cast<std::string*>(p) = std::string(absl::StripAsciiWhitespace(h.substr(5)));
  }
  return len;
}

}  // namespace

std::string UriEncode(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("%%%02X", c));
    }
  }
  return out;
}

struct S3Client::Request {
  std::string method = "GET";
  std::string key;        // empty: the bucket itself
  std::string query;      // canonical: sorted NAME=VALUE pairs, values URI-encoded
  // Request body: `data`, or `len` bytes of `fd` from `offset`.
  const std::string* data = nullptr;
  int fd = -1;
  uint64_t offset = 0, len = 0;
  int out_fd = -1;        // a 2xx answer's body is written here (else kept in Response::body)
};

S3Client::S3Client(S3Config cfg) : cfg_(std::move(cfg)) {
  GlobalInit();
  while (!cfg_.endpoint.empty() && cfg_.endpoint.back() == '/') cfg_.endpoint.pop_back();
}

absl::StatusOr<S3Client::Response> S3Client::Perform(const Request& req, const std::string& what) const {
  std::string url = absl::StrCat(cfg_.endpoint, "/", UriEncode(cfg_.bucket, false));
  if (!req.key.empty()) absl::StrAppend(&url, "/", UriEncode(req.key, true));
  if (!req.query.empty()) absl::StrAppend(&url, "?", req.query);
  std::string sigv4 = absl::StrCat("aws:amz:", cfg_.region, ":s3");
  std::string userpwd = absl::StrCat(cfg_.access_key, ":", cfg_.secret_key);
  absl::Status last;
  for (int attempt = 0; attempt <= cfg_.retries; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
    if (req.out_fd >= 0) {
      if (::ftruncate(req.out_fd, 0) != 0 || ::lseek(req.out_fd, 0, SEEK_SET) != 0) {
        return ErrnoStatus(absl::StrCat(what, ": truncate the download file"));
      }
    }
    CURL* curl = curl_easy_init();
    if (curl == nullptr) return absl::ResourceExhaustedError(absl::StrCat(what, ": curl_easy_init failed"));
    Response resp;
    char errbuf[CURL_ERROR_SIZE] = {};
    struct curl_slist* headers = nullptr;
    // S3 requires the payload hash header; the body is streamed, so it is not hashed (allowed
    // over any transport by S3; use an https endpoint where the network is not trusted).
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    headers = curl_slist_append(headers, "Expect:");
    ReadCtx rd;
    WriteCtx wr;
    wr.fd = req.out_fd;
    wr.body = &resp.body;
    wr.curl = curl;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, cfg_.connect_timeout_s);
    // A transfer that moves less than 1 KiB/s for 60 s is dead.
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteCallback);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &wr);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, HeaderCallback);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &resp.etag);
    if (req.method == "PUT") {
      rd.fd = req.fd;
      rd.data = req.data;
      rd.offset = req.data ? 0 : req.offset;
      rd.left = req.data ? req.data->size() : req.len;
      curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadCallback);
      curl_easy_setopt(curl, CURLOPT_READDATA, &rd);
      curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(rd.left));
    } else if (req.method == "POST") {
      static const std::string kEmpty;
      const std::string& body = req.data ? *req.data : kEmpty;
      curl_easy_setopt(curl, CURLOPT_POST, 1L);
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      headers = curl_slist_append(headers, "Content-Type: application/xml");
    } else if (req.method != "GET") {
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.code);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    if (rd.failed) return ErrnoStatus(absl::StrCat(what, ": read the file being uploaded"));
    if (wr.failed) return absl::DataLossError(absl::StrCat(what, ": cannot write the downloaded data (disk full?)"));
    if (rc != CURLE_OK) {
      last = absl::UnavailableError(absl::StrCat(what, ": ", errbuf[0] ? errbuf : curl_easy_strerror(rc),
                                                 " (endpoint ", cfg_.endpoint, "; check --s3-endpoint and that it is reachable)"));
      continue;  // network trouble: try again
    }
    if (resp.code >= 200 && resp.code < 300) return resp;
    std::string code = XmlField(resp.body, "Code"), message = XmlField(resp.body, "Message");
    std::string said = code.empty() ? absl::StrCat("HTTP ", resp.code)
                                    : absl::StrCat("HTTP ", resp.code, " ", code, ": ", message);
    if (resp.code == 403 || resp.code == 401) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, ": ", said,
          " (check the S3 credentials: --s3-credentials FILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, and --s3-region)"));
    }
    if (resp.code == 404) return absl::NotFoundError(absl::StrCat(what, ": ", said));
    last = absl::UnavailableError(absl::StrCat(what, ": ", said));
    if (resp.code < 500) return last;  // a 4xx does not get better by trying again
  }
  return last;
}

absl::Status S3Client::PutBytes(const std::string& key, const std::string& data) {
  Request r;
  r.method = "PUT";
  r.key = key;
  r.data = &data;
  return Perform(r, "put " + Url(key)).status();
}

absl::Status S3Client::PutFile(const std::string& key, const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path + " to upload it");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > cfg_.part_bytes) return PutMultipart(key, path, size);
  Request r;
  r.method = "PUT";
  r.key = key;
  r.fd = fd.get();
  r.len = size;
  return Perform(r, absl::StrCat("put ", Url(key), " from ", path)).status();
}

absl::Status S3Client::PutMultipart(const std::string& key, const std::string& path, uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path + " to upload it");
  Request create;
  create.method = "POST";
  create.key = key;
  create.query = "uploads=";
  ASSIGN_OR_RETURN(Response created, Perform(create, "start multipart upload of " + Url(key)));
  std::string upload_id = XmlField(created.body, "UploadId");
  if (upload_id.empty()) {
    return absl::DataLossError(absl::StrCat("start multipart upload of ", Url(key), ": no UploadId in the answer"));
  }
  const std::string id_query = "uploadId=" + UriEncode(upload_id, false);
  uint64_t parts = (size + cfg_.part_bytes - 1) / cfg_.part_bytes;
  std::vector<std::string> etags(parts);
  std::atomic<uint64_t> next{0};
  std::mutex err_mu;
  absl::Status err;
  auto worker = [&] {
    for (uint64_t i; (i = next++) < parts;) {
      {
        std::lock_guard<std::mutex> l(err_mu);
        if (!err.ok()) return;
      }
      Request part;
      part.method = "PUT";
      part.key = key;
      part.query = absl::StrCat("partNumber=", i + 1, "&", id_query);
      part.fd = fd.get();
      part.offset = i * cfg_.part_bytes;
      part.len = std::min<uint64_t>(cfg_.part_bytes, size - part.offset);
      auto r = Perform(part, absl::StrCat("put part ", i + 1, "/", parts, " of ", Url(key), " from ", path));
      std::lock_guard<std::mutex> l(err_mu);
      if (!r.ok()) {
        if (err.ok()) err = r.status();
        return;
      }
      if (r->etag.empty() && err.ok()) {
        err = absl::DataLossError(absl::StrCat("put part ", i + 1, " of ", Url(key), ": no ETag in the answer"));
      }
      etags[i] = r->etag;
    }
  };
  std::vector<std::thread> threads;
  int n = static_cast<int>(std::min<uint64_t>(std::max(1, cfg_.parallel), parts));
  for (int k = 1; k < n; ++k) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  // Every part sent, the upload not completed: S3 holds the parts, no object yet.
  if (err.ok()) FaultPoint("upload-multipart");
  auto abort = [&](absl::Status st) {
    Request a;
    a.method = "DELETE";
    a.key = key;
    a.query = id_query;
    (void)Perform(a, "abort multipart upload of " + Url(key));
    return st;
  };
  if (!err.ok()) return abort(err);
  std::string xml = "<CompleteMultipartUpload>";
  for (uint64_t i = 0; i < parts; ++i) {
    absl::StrAppend(&xml, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>", etags[i], "</ETag></Part>");
  }
  absl::StrAppend(&xml, "</CompleteMultipartUpload>");
  Request done;
  done.method = "POST";
  done.key = key;
  done.query = id_query;
  done.data = &xml;
  auto r = Perform(done, "complete multipart upload of " + Url(key));
  if (!r.ok()) return abort(r.status());
  // S3 can answer 200 with an error in the body of a CompleteMultipartUpload.
  if (r->body.find("<Error>") != std::string::npos) {
    return abort(absl::UnavailableError(absl::StrCat("complete multipart upload of ", Url(key), ": ",
                                                     XmlField(r->body, "Code"), ": ", XmlField(r->body, "Message"))));
  }
  return absl::OkStatus();
}

absl::Status S3Client::GetFile(const std::string& key, const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus("create " + path + " to download into");
  Request r;
  r.key = key;
  r.out_fd = fd.get();
  RETURN_IF_ERROR(Perform(r, absl::StrCat("get ", Url(key), " into ", path)).status());
  if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> S3Client::GetBytes(const std::string& key) {
  Request r;
  r.key = key;
  ASSIGN_OR_RETURN(Response resp, Perform(r, "get " + Url(key)));
  return std::move(resp.body);
}

absl::StatusOr<std::vector<S3Object>> S3Client::List(const std::string& prefix) {
  std::vector<S3Object> out;
  std::string token;
  for (int page = 0; page < 100000; ++page) {
    Request r;
    // Canonical order: continuation-token < list-type < prefix.
    r.query = absl::StrCat(token.empty() ? "" : "continuation-token=" + UriEncode(token, false) + "&",
                           "list-type=2&prefix=", UriEncode(prefix, false));
    ASSIGN_OR_RETURN(Response resp, Perform(r, absl::StrCat("list s3://", cfg_.bucket, "/", prefix)));
    size_t pos = 0;
    while (true) {
      std::string contents = XmlField(resp.body, "Contents", &pos);
      if (pos == std::string::npos) break;
      S3Object o;
      o.key = XmlField(contents, "Key");
      if (!absl::SimpleAtoi(XmlField(contents, "Size"), &o.size)) o.size = 0;
      out.push_back(std::move(o));
    }
    if (XmlField(resp.body, "IsTruncated") != "true") return out;
    token = XmlField(resp.body, "NextContinuationToken");
    if (token.empty()) {
      return absl::DataLossError(absl::StrCat("list s3://", cfg_.bucket, "/", prefix, ": truncated without a continuation token"));
    }
  }
  return out;
}

absl::Status S3Client::Delete(const std::string& key) {
  Request r;
  r.method = "DELETE";
  r.key = key;
  auto resp = Perform(r, "delete " + Url(key));
  if (!resp.ok() && !absl::IsNotFound(resp.status())) return resp.status();
  return absl::OkStatus();
}

}  // namespace cairn::daemon::storage
