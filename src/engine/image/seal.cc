#include "engine/image/seal.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/image/format.h"

namespace cairn::image {
namespace {

constexpr char kSealMagic[] = "cairn-seal 1";
constexpr size_t kNonce = 12, kTag = 16, kSealId = 16;
constexpr size_t kChunk = 4 << 20;
// The files a seal covers, in the order of its lines.
constexpr const char* kSealed[] = {kMetaFile, kFilesFile, kPagesFile};

std::string Hex(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&s, "%02x", p[i]);
  return s;
}

bool FromHex(absl::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = absl::ascii_tolower(hex[2 * i + k]);
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    out[i] = static_cast<uint8_t>(v);
  }
  return true;
}

// Only the caller may have written it (and so changed it since): owned by the caller, not
// writable by group or others.
absl::Status CheckPrivate(const struct stat& st, const std::string& path) {
  if (st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrFormat(
      "%s belongs to uid %d with mode %04o: the files of a sealed checkpoint must be writable by uid %d alone, or they "
      "could change after their seal was checked; copy the checkpoint as that user (cp -a) into a directory of its own",
      path, st.st_uid, st.st_mode & 07777, ::geteuid()));
}

struct Line {
  uint64_t size = 0;
  std::array<uint8_t, kNonce> nonce{};
  std::array<uint8_t, kTag> tag{};
  std::string here;  // the file as the sealer left it (Identity), "" if not recorded
};

// Which file this is on this machine, and whether it was written since: device, inode,
// modification and change times (ns). The change time moves with every write, rename or
// chmod and cannot be set back by anyone but the clock's owner.
std::string Identity(const struct stat& st) {
  return absl::StrCat(st.st_dev, " ", st.st_ino, " ", st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, " ",
                      st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec);
}

// Binds a file's MAC to this seal and to the file's name. (Its length is bound by GMAC
// itself: the final block authenticates the length of the data.)
std::string Preamble(const ImageKey& key, const std::string& seal_id, const std::string& file) {
  return absl::StrCat(kSealMagic, "\nkey ", key.id(), "\nseal ", seal_id, "\nfile ", file, "\n");
}

// AES-256-GCM, fetched once. OpenSSL 3 without its configuration file (nothing in it
// concerns this, and reading it and the implicit fetch of every init cost tens of ms at a
// restore's start).
const EVP_CIPHER* Aes256Gcm() {
  static const EVP_CIPHER* cipher = [] {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr);
    return EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  }();
  return cipher;
}

// AES-256-GMAC over a stream of bytes: AES-GCM with everything as associated data.
class Gmac {
 public:
  absl::Status Init(const ImageKey& key, const std::array<uint8_t, kNonce>& nonce, const std::string& preamble) {
    ctx_.reset(EVP_CIPHER_CTX_new());
    if (!ctx_ || Aes256Gcm() == nullptr || EVP_EncryptInit_ex(ctx_.get(), Aes256Gcm(), nullptr, nullptr, nullptr) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_SET_IVLEN, kNonce, nullptr) != 1 ||
        EVP_EncryptInit_ex(ctx_.get(), nullptr, nullptr, key.bytes().data(), nonce.data()) != 1) {
      return absl::InternalError("OpenSSL: cannot start AES-256-GMAC");
    }
    return Update(preamble.data(), preamble.size());
  }
  absl::Status Update(const void* p, size_t n) {
    int outl = 0;
    if (EVP_EncryptUpdate(ctx_.get(), nullptr, &outl, static_cast<const uint8_t*>(p), static_cast<int>(n)) != 1) {
      return absl::InternalError("OpenSSL: AES-256-GMAC update failed");
    }
    return absl::OkStatus();
  }
  // Adds bytes [from, to) of `fd`.
  absl::Status UpdateFrom(int fd, uint64_t from, uint64_t to, const std::string& what) {
    if (buf_.empty()) buf_.resize(static_cast<size_t>(std::min<uint64_t>(kChunk, std::max<uint64_t>(to - from, 1))));
    for (uint64_t off = from; off < to;) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buf_.size(), to - off));
      ssize_t n = ::pread(fd, buf_.data(), want, static_cast<off_t>(off));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("read " + what);
      }
      if (n == 0) return absl::DataLossError(absl::StrCat(what, " is shorter than its seal says (", to, " bytes)"));
      RETURN_IF_ERROR(Update(buf_.data(), static_cast<size_t>(n)));
      off += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::array<uint8_t, kTag>> Final() {
    uint8_t none[16];
    int outl = 0;
    std::array<uint8_t, kTag> tag{};
    if (EVP_EncryptFinal_ex(ctx_.get(), none, &outl) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, kTag, tag.data()) != 1) {
      return absl::InternalError("OpenSSL: AES-256-GMAC final failed");
    }
    return tag;
  }

 private:
  struct Free {
    void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
  };
  std::unique_ptr<EVP_CIPHER_CTX, Free> ctx_;
  std::vector<uint8_t> buf_;
};

// AES-256-GMAC of the preamble and the first `size` bytes of `fd`.
absl::StatusOr<std::array<uint8_t, kTag>> Mac(const ImageKey& key, const std::array<uint8_t, kNonce>& nonce,
                                              const std::string& preamble, int fd, uint64_t size,
                                              const std::string& what) {
  Gmac m;
  RETURN_IF_ERROR(m.Init(key, nonce, preamble));
  RETURN_IF_ERROR(m.UpdateFrom(fd, 0, size, what));
  return m.Final();
}

std::string NewSealId() {
  uint8_t sid[kSealId];
  if (RAND_bytes(sid, sizeof sid) != 1) return "";
  return Hex(sid, sizeof sid);
}

// Opens a file of the checkpoint for reading: no symlink followed, writable by us alone, of
// the size the seal says.
absl::StatusOr<UniqueFd> OpenSealed(const std::string& path, uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  if (!S_ISREG(st.st_mode)) return absl::DataLossError(path + " is not a regular file");
  RETURN_IF_ERROR(CheckPrivate(st, path));
  if (static_cast<uint64_t>(st.st_size) != size) {
    return absl::DataLossError(absl::StrFormat(
        "%s does not match its seal: it holds %d bytes, the seal says %d; it was changed after the checkpoint was "
        "written (or forged); not restored",
        path, st.st_size, size));
  }
  return fd;
}

absl::Status Matches(const std::array<uint8_t, kTag>& got, const Line& want, const std::string& path) {
  if (CRYPTO_memcmp(got.data(), want.tag.data(), kTag) == 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      path, " does not match its seal: it was changed after the checkpoint was written (or forged); not restored"));
}

}  // namespace

absl::StatusOr<ImageKey> ImageKey::Load(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open image key " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "image key %s must be a regular file of uid %d readable by nobody else (it is uid %d, mode %04o): chown and "
        "chmod 600 it, or make a new one",
        path, ::geteuid(), st.st_uid, st.st_mode & 07777));
  }
  char text[130];
  ssize_t n = ::read(fd.get(), text, sizeof text);
  if (n < 0) return ErrnoStatus("read " + path);
  ImageKey k;
  if (!FromHex(absl::StripAsciiWhitespace(absl::string_view(text, static_cast<size_t>(n))), k.bytes_.data(), 32)) {
    return absl::InvalidArgumentError(path + ": not an image key (64 hex digits)");
  }
  uint8_t digest[SHA256_DIGEST_LENGTH];
  std::string idin = "cairn image key id\n" + Hex(k.bytes_.data(), 32);
  SHA256(reinterpret_cast<const uint8_t*>(idin.data()), idin.size(), digest);
  k.id_ = Hex(digest, 8);
  return k;
}

absl::StatusOr<ImageKey> ImageKey::LoadOrCreate(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) return Load(path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) {
      std::filesystem::create_directories(dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("create ", dir, " (for the image key): ", ec.message()));
      ::chmod(dir.c_str(), 0700);
    }
  }
  uint8_t bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return absl::InternalError("OpenSSL: no random bytes for an image key");
  std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoStatus("create image key " + tmp);
    std::string text = Hex(bytes, sizeof bytes) + "\n";
    absl::Status w = WriteAll(fd.get(), text, tmp);
    if (w.ok() && ::fsync(fd.get()) != 0) w = ErrnoStatus("fsync " + tmp);
    if (!w.ok()) {
      ::unlink(tmp.c_str());
      return w;
    }
  }
  // link(2) fails if another caller made one meanwhile: then both use that one.
  int linked = ::link(tmp.c_str(), path.c_str());
  int err = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && err != EEXIST) {
    errno = err;
    return ErrnoStatus("create image key " + path);
  }
  if (!dir.empty()) (void)SyncDir(dir);
  return Load(path);
}

std::string DefaultImageKeyPath() {
  const char* d = std::getenv("CAIRN_STATE_DIR");
  return absl::StrCat(d != nullptr && *d != '\0' ? d : "/var/lib/cairn", "/image.key");
}

// ---- PagesSealer

struct PagesSealer::State {
  std::string path, seal_id;
  std::array<uint8_t, kNonce> nonce{};
  Gmac mac;
  UniqueFd fd;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t end = 0;      // GUARDED_BY(mu): written so far
  uint64_t hashed = 0;   // GUARDED_BY(mu)
  bool stop = false;     // GUARDED_BY(mu): the commit takes over (or the dump is abandoned)
  absl::Status status;   // GUARDED_BY(mu)
  std::thread thread;

  void Run() {
    // Only has to keep up while the dump writes, beside the processes. It may be starved (the
    // processes left running keep every CPU busy): the commit then takes the rest over at its
    // own priority (Finish), so it hashes a chunk at a time.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      cv.wait(l, [&] { return stop || end > hashed; });
      if (stop) return;
      uint64_t from = hashed, to = std::min<uint64_t>(end, hashed + kChunk);
      l.unlock();
      absl::Status st = mac.UpdateFrom(fd.get(), from, to, path);
      l.lock();
      hashed = to;
      if (!st.ok()) {
        status = st;
        return;
      }
    }
  }

  // The final MAC of [0, size): the thread stops after its chunk, this one hashes the rest.
  absl::StatusOr<std::array<uint8_t, kTag>> Finish(uint64_t size) {
    {
      std::lock_guard<std::mutex> l(mu);
      end = std::max(end, size);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    RETURN_IF_ERROR(status);
    if (hashed < size) {
      RETURN_IF_ERROR(mac.UpdateFrom(fd.get(), hashed, size, path));
      hashed = size;
    }
    if (hashed != size) {
      return absl::InternalError(absl::StrFormat("%s: %d bytes were sealed as written, the file has %d", path, hashed, size));
    }
    return mac.Final();
  }
};

PagesSealer::PagesSealer(std::unique_ptr<State> s) : s_(std::move(s)) {}

absl::StatusOr<std::unique_ptr<PagesSealer>> PagesSealer::Start(const ImageKey& key, int fd, const std::string& path) {
  auto s = std::make_unique<State>();
  s->path = path;
  s->seal_id = NewSealId();
  if (s->seal_id.empty() || RAND_bytes(s->nonce.data(), kNonce) != 1) {
    return absl::InternalError("OpenSSL: no random bytes for a seal");
  }
  s->fd = UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!s->fd.valid()) return ErrnoStatus("dup " + path);
  RETURN_IF_ERROR(s->mac.Init(key, s->nonce, Preamble(key, s->seal_id, kPagesFile)));
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<PagesSealer>(new PagesSealer(std::move(s)));
}

PagesSealer::~PagesSealer() {
  {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  if (s_->thread.joinable()) s_->thread.join();
}

void PagesSealer::Advance(uint64_t end) {
  {
    std::lock_guard<std::mutex> l(s_->mu);
    if (end <= s_->end) return;
    s_->end = end;
  }
  s_->cv.notify_one();
}

// ---- SealImage

absl::Status SealImage(const std::string& dir, const ImageKey& key, PagesSealer* pages) {
  std::string seal_id = pages != nullptr ? pages->s_->seal_id : NewSealId();
  if (seal_id.empty()) return absl::InternalError("OpenSSL: no random bytes for a seal");
  std::string text = absl::StrCat(kSealMagic, "\nkey ", key.id(), "\nseal ", seal_id, "\n");
  std::string here;
  for (const char* f : kSealed) {
    std::string path = dir + "/" + f;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus("open " + path + " (to seal it)");
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
    std::array<uint8_t, kNonce> nonce{};
    uint64_t size = static_cast<uint64_t>(st.st_size);
    std::array<uint8_t, kTag> tag{};
    if (pages != nullptr && std::string(f) == kPagesFile) {
      nonce = pages->s_->nonce;
      ASSIGN_OR_RETURN(tag, pages->s_->Finish(size));
    } else {
      if (RAND_bytes(nonce.data(), kNonce) != 1) return absl::InternalError("OpenSSL: no random bytes for a seal");
      ASSIGN_OR_RETURN(tag, Mac(key, nonce, Preamble(key, seal_id, f), fd.get(), size, path));
    }
    absl::StrAppend(&text, f, " ", size, " ", Hex(nonce.data(), kNonce), " ", Hex(tag.data(), kTag), "\n");
    absl::StrAppend(&here, "here ", f, " ", Identity(st), "\n");
  }
  text += here;
  std::string path = dir + "/" + kSealFile;
  UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) return ErrnoStatus("create " + path);
  RETURN_IF_ERROR(WriteAll(out.get(), text, path));
  if (::fsync(out.get()) != 0) return ErrnoStatus("fsync " + path);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SealCheck>> SealCheck::Start(const std::string& dir, const ImageKey& key) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoStatus("stat " + dir);
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(dir + " is not a directory");
  RETURN_IF_ERROR(CheckPrivate(st, dir));
  const std::string seal_path = dir + "/" + kSealFile;
  UniqueFd sf(::open(seal_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!sf.valid()) {
    if (errno == ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", dir, " is not sealed (no ", kSealFile, "): anyone who could write that directory may have "
          "written it; restore it only if you trust where it came from, with --trust-unsigned"));
    }
    return ErrnoStatus("open " + seal_path);
  }
  if (::fstat(sf.get(), &st) != 0) return ErrnoStatus("stat " + seal_path);
  RETURN_IF_ERROR(CheckPrivate(st, seal_path));
  char raw[2048];
  ssize_t n = ::read(sf.get(), raw, sizeof raw);
  if (n < 0) return ErrnoStatus("read " + seal_path);
  absl::string_view text(raw, static_cast<size_t>(n));
  if (text.empty() || text.back() != '\n') return absl::DataLossError(seal_path + ": truncated (damaged or forged)");
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  auto bad = [&](const std::string& why) { return absl::DataLossError(absl::StrCat(seal_path, ": ", why, " (damaged or forged)")); };
  const size_t n_sealed = std::size(kSealed);
  if ((lines.size() != 3 + n_sealed && lines.size() != 3 + 2 * n_sealed) || lines[0] != kSealMagic) {
    return bad("not a cairn seal");
  }
  if (!absl::StartsWith(lines[1], "key ") || !absl::StartsWith(lines[2], "seal ")) return bad("no key or seal id");
  std::string key_id = lines[1].substr(4), seal_id = lines[2].substr(5);
  if (key_id != key.id()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint ", dir, " was sealed with image key ", key_id, ", not with this node's key ", key.id(),
        " (--image-key): it comes from another node or cluster; give that cluster's key, or --trust-unsigned if you "
        "trust where it came from"));
  }
  uint8_t sid[kSealId];
  if (!FromHex(seal_id, sid, kSealId)) return bad("malformed seal id");
  std::map<std::string, Line> entries;
  for (size_t i = 0; i < std::size(kSealed); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[3 + i], ' ');
    Line l;
    if (f.size() != 4 || f[0] != kSealed[i] || !absl::SimpleAtoi(f[1], &l.size) ||
        !FromHex(f[2], l.nonce.data(), kNonce) || !FromHex(f[3], l.tag.data(), kTag)) {
      return bad(absl::StrCat("malformed line for ", kSealed[i]));
    }
    if (lines.size() == 3 + 2 * n_sealed) {
      std::string prefix = absl::StrCat("here ", kSealed[i], " ");
      if (!absl::StartsWith(lines[3 + n_sealed + i], prefix)) return bad(absl::StrCat("malformed line for ", kSealed[i]));
      l.here = lines[3 + n_sealed + i].substr(prefix.size());
      std::vector<std::string> ids = absl::StrSplit(l.here, ' ');
      uint64_t v = 0;
      if (ids.size() != 4 || !std::all_of(ids.begin(), ids.end(), [&](const std::string& x) {
            return !x.empty() && std::all_of(x.begin(), x.end(), absl::ascii_isdigit) && absl::SimpleAtoi(x, &v);
          })) {
        return bad(absl::StrCat("malformed line for ", kSealed[i]));
      }
    }
    entries[kSealed[i]] = l;
  }
  // The metadata and files.img now; pages.img on a thread.
  for (const char* f : {kMetaFile, kFilesFile}) {
    std::string path = dir + "/" + f;
    const Line& l = entries[f];
    ASSIGN_OR_RETURN(UniqueFd fd, OpenSealed(path, l.size));
    ASSIGN_OR_RETURN(auto tag, Mac(key, l.nonce, Preamble(key, seal_id, f), fd.get(), l.size, path));
    RETURN_IF_ERROR(Matches(tag, l, path));
  }
  std::string pages_path = dir + "/" + kPagesFile;
  Line pages = entries[kPagesFile];
  ASSIGN_OR_RETURN(UniqueFd pages_fd, OpenSealed(pages_path, pages.size));
  std::unique_ptr<SealCheck> check(new SealCheck());
  // pages.img is the very file the sealer MACed, not written since (same inode, same times;
  // only root could have written it, above): its MAC would only say so again.
  if (struct stat pst {}; !pages.here.empty() && ::fstat(pages_fd.get(), &pst) == 0 && Identity(pst) == pages.here) {
    return check;
  }
  SealCheck* c = check.get();
  c->thread_ = std::thread([c, key, seal_id, pages, pages_path, fd = std::move(pages_fd)] {
    auto tag = Mac(key, pages.nonce, Preamble(key, seal_id, kPagesFile), fd.get(), pages.size, pages_path);
    c->pages_ = tag.ok() ? Matches(*tag, pages, pages_path) : tag.status();
  });
  return check;
}

SealCheck::~SealCheck() {
  if (thread_.joinable()) thread_.join();
}

absl::Status SealCheck::Wait() {
  if (thread_.joinable()) thread_.join();
  return pages_;
}

namespace {

constexpr char kSideMagic[] = "cairn-side-seal 1";

// The seal id of the checkpoint in `dir` (its seal's third line), unchecked: a side file
// bound to it is only as good as that seal, which the restore checks.
absl::StatusOr<std::string> SealIdOf(const std::string& dir) {
  std::string path = dir + "/" + kSealFile;
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 3 || lines[0] != kSealMagic || !absl::StartsWith(lines[2], "seal ")) {
    return absl::DataLossError(absl::StrCat(path, ": not a cairn seal (damaged or forged)"));
  }
  return lines[2].substr(5);
}

absl::StatusOr<std::array<uint8_t, kTag>> MacBytes(const ImageKey& key, const std::array<uint8_t, kNonce>& nonce,
                                                   const std::string& preamble, const std::string& bytes) {
  Gmac m;
  RETURN_IF_ERROR(m.Init(key, nonce, preamble));
  RETURN_IF_ERROR(m.Update(bytes.data(), bytes.size()));
  return m.Final();
}

}  // namespace

absl::Status SealSideFile(const std::string& dir, const std::string& name, const ImageKey& key) {
  ASSIGN_OR_RETURN(std::string seal_id, SealIdOf(dir));
  std::string path = dir + "/" + name;
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  std::array<uint8_t, kNonce> nonce{};
  if (RAND_bytes(nonce.data(), kNonce) != 1) return absl::InternalError("OpenSSL: no random bytes for a seal");
  ASSIGN_OR_RETURN(auto tag, MacBytes(key, nonce, Preamble(key, seal_id, name), bytes));
  std::string text = absl::StrCat(kSideMagic, "\nkey ", key.id(), "\nseal ", seal_id, "\n", name, " ", bytes.size(), " ",
                                  Hex(nonce.data(), kNonce), " ", Hex(tag.data(), kTag), "\n");
  std::string seal_path = path + ".seal";
  std::string tmp = seal_path + ".tmp";
  UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) return ErrnoStatus("create " + tmp);
  RETURN_IF_ERROR(WriteAll(out.get(), text, tmp));
  if (::fsync(out.get()) != 0) return ErrnoStatus("fsync " + tmp);
  if (::rename(tmp.c_str(), seal_path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSealedSideFile(const std::string& dir, const std::string& name, const ImageKey& key) {
  std::string path = dir + "/" + name;
  std::string seal_path = path + ".seal";
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(seal_path, ": ", why, " (damaged or forged); ", path, " not used"));
  };
  UniqueFd sf(::open(seal_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!sf.valid()) {
    if (errno == ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is not sealed (no ", name, ".seal): anyone who could write where it was stored may have written "
          "it; not used"));
    }
    return ErrnoStatus("open " + seal_path);
  }
  struct stat st {};
  if (::fstat(sf.get(), &st) != 0) return ErrnoStatus("stat " + seal_path);
  RETURN_IF_ERROR(CheckPrivate(st, seal_path));
  ASSIGN_OR_RETURN(std::string text, ReadFile(seal_path));
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() != 4 || lines[0] != kSideMagic || !absl::StartsWith(lines[1], "key ") ||
      !absl::StartsWith(lines[2], "seal ")) {
    return bad("not a cairn side seal");
  }
  if (lines[1].substr(4) != key.id()) {
    return absl::PermissionDeniedError(absl::StrCat(seal_path, " was sealed with image key ", lines[1].substr(4),
                                                    ", not with this node's key ", key.id(), "; ", path, " not used"));
  }
  ASSIGN_OR_RETURN(std::string checkpoint_seal, SealIdOf(dir));
  std::string seal_id = lines[2].substr(5);
  if (seal_id != checkpoint_seal) return bad("it belongs to another checkpoint");
  std::vector<std::string> f = absl::StrSplit(lines[3], ' ');
  Line l;
  if (f.size() != 4 || f[0] != name || !absl::SimpleAtoi(f[1], &l.size) || !FromHex(f[2], l.nonce.data(), kNonce) ||
      !FromHex(f[3], l.tag.data(), kTag)) {
    return bad("malformed");
  }
  ASSIGN_OR_RETURN(UniqueFd fd, OpenSealed(path, l.size));
  std::string bytes(static_cast<size_t>(l.size), '\0');
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = ::pread(fd.get(), bytes.data() + off, bytes.size() - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + path);
    if (n == 0) return bad("the file is shorter than its seal says");
    off += static_cast<size_t>(n);
  }
  ASSIGN_OR_RETURN(auto tag, MacBytes(key, l.nonce, Preamble(key, seal_id, name), bytes));
  RETURN_IF_ERROR(Matches(tag, l, path));
  return bytes;
}

absl::Status CheckSeal(const std::string& dir, const ImageKey& key) {
  ASSIGN_OR_RETURN(std::unique_ptr<SealCheck> c, SealCheck::Start(dir, key));
  return c->Wait();
}

}  // namespace cairn::image
