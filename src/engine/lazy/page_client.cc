#include "engine/lazy/page_client.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/token.h"
#include "engine/image/chain.h"
#include "engine/lazy/page_protocol.h"

namespace cairn::lazy {
namespace {

constexpr int kConnectTimeoutMs = 10000;
// A server that sends nothing for this long while a request is outstanding is taken as gone:
// the restored process is waiting on a page meanwhile.
constexpr int kReceiveTimeoutS = 30;
constexpr size_t kWindow = 4;  // read-ahead blocks in flight (blocks are at most 8 MiB as cairn writes them)

class LinkSource : public image::PageSource {
 public:
  LinkSource(std::shared_ptr<PageClient> client, uint32_t link) : client_(std::move(client)), link_(link) {}
  absl::Status Read(uint64_t offset, uint64_t len, char* buf) override { return client_->Read(link_, offset, len, buf); }
  std::string Describe() const override { return client_->Describe(); }
  PageClient* client() const { return client_.get(); }

 private:
  std::shared_ptr<PageClient> client_;
  uint32_t link_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<PageClient>> PageClient::Connect(const std::string& server,
                                                                 const std::string& token_file, uint64_t who) {
  if (token_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--page-server ", server, " needs --token-file (the token the page server was started with)"));
  }
  ASSIGN_OR_RETURN(std::string token, ReadTokenFile(token_file));
  std::shared_ptr<PageClient> c(new PageClient(server, std::move(token), who));
  ASSIGN_OR_RETURN(c->fd_, c->Dial(&c->links_));
  if (c->links_ == 0 || c->links_ > static_cast<uint32_t>(image::kMaxChainLength)) {
    return absl::DataLossError(absl::StrCat(c->Describe(), " serves a chain of ", c->links_, " links"));
  }
  return c;
}

PageClient::~PageClient() {
  {
    std::lock_guard<std::mutex> l(smu_);
    stop_ = true;
  }
  scv_.notify_all();
  if (sfd_.valid()) ::shutdown(sfd_.get(), SHUT_RDWR);
  if (streamer_.joinable()) streamer_.join();
}

absl::StatusOr<UniqueFd> PageClient::Dial(uint32_t* links) {
  std::string peer = Describe();
  ASSIGN_OR_RETURN(std::vector<char> addr, wire::ResolveHostPort(server_, /*passive=*/false));
  auto sa = reinterpret_cast<const sockaddr*>(addr.data());
  UniqueFd fd(::socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoStatus("socket (to " + peer + ")");
  if (::connect(fd.get(), sa, static_cast<socklen_t>(addr.size())) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", peer, ": ", std::strerror(errno),
                                                 " (is `cairn page-server` running there and reachable?)"));
    }
    pollfd p{fd.get(), POLLOUT, 0};
    int rc;
    while ((rc = ::poll(&p, 1, kConnectTimeoutMs)) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t elen = sizeof err;
    if (rc == 0) err = ETIMEDOUT;
    else ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", peer, ": ", std::strerror(err),
                                                 " (is `cairn page-server` running there and reachable?)"));
    }
  }
  int fl = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{kReceiveTimeoutS, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  RETURN_IF_ERROR(wire::SendMessage(fd.get(), wire::MakeHeader(wire::kHello, wire::kVersion, 0, who_, 0, token_.size()),
                                    token_.data(), peer));
  wire::Header h{};
  RETURN_IF_ERROR(wire::RecvHeader(fd.get(), &h, peer));
  if (h.op == wire::kError) {
    std::string msg(std::min<uint64_t>(h.len, 64 * 1024), '\0');
    RETURN_IF_ERROR(wire::RecvAll(fd.get(), msg.data(), msg.size(), peer));
    return absl::PermissionDeniedError(absl::StrCat(peer, " refused the connection: ", msg));
  }
  if (h.op != wire::kOk) return absl::DataLossError(absl::StrCat(peer, ": unexpected answer to hello"));
  *links = h.link;
  return fd;
}

absl::Status PageClient::Request(int fd, uint32_t op, uint32_t link, uint32_t kind, uint64_t offset, uint64_t arg,
                                 std::string* small, char* into, uint64_t into_len) {
  std::string peer = Describe();
  RETURN_IF_ERROR(wire::SendMessage(fd, wire::MakeHeader(static_cast<wire::Op>(op), link, kind, offset, arg), nullptr, peer));
  wire::Header h{};
  RETURN_IF_ERROR(wire::RecvHeader(fd, &h, peer));
  if (h.op == wire::kError) {
    std::string msg(std::min<uint64_t>(h.len, 64 * 1024), '\0');
    RETURN_IF_ERROR(wire::RecvAll(fd, msg.data(), msg.size(), peer));
    return absl::FailedPreconditionError(absl::StrCat(peer, ": ", msg));
  }
  if (h.op != wire::kOk) return absl::DataLossError(absl::StrCat(peer, ": unexpected answer ", h.op));
  if (small) {
    if (h.len > (1ull << 32)) return absl::DataLossError(absl::StrCat(peer, ": answer of ", h.len, " bytes is too large"));
    small->resize(h.len);
    return wire::RecvAll(fd, small->data(), small->size(), peer);
  }
  if (h.len != into_len) {
    return absl::DataLossError(absl::StrCat(peer, ": sent ", h.len, " bytes where ", into_len, " were asked for"));
  }
  return wire::RecvAll(fd, into, into_len, peer);
}

absl::StatusOr<std::unique_ptr<image::ImageReader>> PageClient::OpenChain(const std::shared_ptr<PageClient>& self) {
  std::vector<std::unique_ptr<image::ImageReader>> links;
  std::lock_guard<std::mutex> l(mu_);
  for (uint32_t i = 0; i < links_; ++i) {
    std::string meta, files;
    RETURN_IF_ERROR(Request(fd_.get(), wire::kGetFile, i, wire::kMetaFile, 0, 0, &meta, nullptr, 0));
    RETURN_IF_ERROR(Request(fd_.get(), wire::kGetFile, i, wire::kFilesFile, 0, 0, &files, nullptr, 0));
    UniqueFd mem(::memfd_create("cairn-files.img", MFD_CLOEXEC));
    if (!mem.valid()) return ErrnoStatus("memfd_create (files.img from " + Describe() + ")");
    RETURN_IF_ERROR(WriteAll(mem.get(), files, "memfd"));
    std::string label = absl::StrCat(Describe(), ", link ", i);
    ASSIGN_OR_RETURN(auto r, image::ImageReader::FromParts(label, meta, std::move(mem),
                                                          std::make_unique<LinkSource>(self, i)));
    links.push_back(std::move(r));
  }
  for (size_t i = 0; i < links.size(); ++i) {
    const image::Checkpoint& m = links[i]->meta();
    bool last = i + 1 == links.size();
    if (m.has_parent() == last || (!last && m.parent().id() != links[i + 1]->meta().id())) {
      return absl::DataLossError(absl::StrCat(Describe(), ": the chain it serves does not link up at link ", i));
    }
    chain_.push_back(links[i].get());
  }
  for (size_t i = links.size() - 1; i > 0; --i) links[i - 1]->set_parent(std::move(links[i]));
  return std::move(links[0]);
}

int PageClient::LinkOf(const image::ImageReader* img) const {
  for (size_t i = 0; i < chain_.size(); ++i) {
    if (chain_[i] == img) return static_cast<int>(i);
  }
  return -1;
}

void PageClient::SkipTo(const Range& r) {
  std::lock_guard<std::mutex> l(smu_);
  auto it = plan_index_.find({r.link, r.offset, r.len});
  if (it == plan_index_.end() || it->second <= consumed_) return;
  consumed_ = it->second;
  for (auto e = ready_.begin(); e != ready_.end() && e->first < consumed_;) {
    state_[e->first] = kGone;
    spare_.push_back(std::move(e->second));
    e = ready_.erase(e);
  }
  scv_.notify_all();
}

bool PageClient::Take(const Range& r, std::vector<char>* buf) {
  std::unique_lock<std::mutex> l(smu_);
  auto it = plan_index_.find({r.link, r.offset, r.len});
  if (it == plan_index_.end() || (state_[it->second] != kOnItsWay && state_[it->second] != kReady)) return false;
  size_t idx = it->second;
  auto t0 = std::chrono::steady_clock::now();
  scv_.wait(l, [&] { return state_[idx] != kOnItsWay || !stream_error_.ok(); });
  stream_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (state_[idx] != kReady) return false;
  ++stream_hits_;
  state_[idx] = kGone;
  auto node = ready_.extract(idx);
  if (idx == consumed_) ++consumed_;
  std::swap(*buf, node.mapped());
  if (!node.mapped().empty()) spare_.push_back(std::move(node.mapped()));
  scv_.notify_all();
  return true;
}

absl::Status PageClient::Read(uint32_t link, uint64_t offset, uint64_t len, char* buf) {
  {
    std::unique_lock<std::mutex> l(smu_);
    auto it = plan_index_.find({link, offset, len});
    if (it != plan_index_.end() && (state_[it->second] == kOnItsWay || state_[it->second] == kReady)) {
      size_t idx = it->second;
      auto t0 = std::chrono::steady_clock::now();
      scv_.wait(l, [&] { return state_[idx] != kOnItsWay || !stream_error_.ok(); });
      stream_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (state_[idx] == kReady) {
        ++stream_hits_;
        state_[idx] = kGone;
        auto node = ready_.extract(idx);
        if (idx == consumed_) ++consumed_;
        scv_.notify_all();
        l.unlock();
        std::memcpy(buf, node.mapped().data(), len);
        l.lock();
        spare_.push_back(std::move(node.mapped()));
        return absl::OkStatus();
      }
      // The stream failed: ask on the first connection, which says whether the server is gone.
    }
  }
  {
    std::lock_guard<std::mutex> l(smu_);
    ++direct_reads_;
  }
  std::lock_guard<std::mutex> l(mu_);
  return Request(fd_.get(), wire::kRead, link, 0, offset, len, nullptr, buf, len);
}

absl::Status PageClient::ReadAhead(std::vector<Range> plan) {
  if (plan.empty() || streamer_.joinable()) return absl::OkStatus();
  uint32_t links = 0;
  ASSIGN_OR_RETURN(sfd_, Dial(&links));
  plan_ = std::move(plan);
  for (size_t i = 0; i < plan_.size(); ++i) plan_index_.emplace(std::tuple{plan_[i].link, plan_[i].offset, plan_[i].len}, i);
  state_.assign(plan_.size(), kNotAsked);
  streamer_ = std::thread([this] { StreamLoop(); });
  return absl::OkStatus();
}

void PageClient::StreamLoop() {
  std::string peer = Describe();
  std::deque<size_t> inflight;
  auto fail = [&](absl::Status s) {
    CAIRN_LOG_DEBUG("event=page_stream_failed server={} why=\"{}\"", server_, std::string(s.message()));
    std::lock_guard<std::mutex> l(smu_);
    if (stream_error_.ok()) stream_error_ = s;
    scv_.notify_all();
  };
  for (;;) {
    // Ask for more while fewer than kWindow blocks are on their way or waiting to be taken.
    // Replies already asked for are always received (a Read may be waiting for one).
    for (;;) {
      size_t next;
      {
        std::lock_guard<std::mutex> l(smu_);
        if (stop_) return;
        next_send_ = std::max(next_send_, consumed_);
        if (inflight.size() + ready_.size() >= kWindow || next_send_ >= plan_.size()) break;
        next = next_send_++;
        state_[next] = kOnItsWay;
      }
      const Range& r = plan_[next];
      absl::Status s = wire::SendMessage(sfd_.get(), wire::MakeHeader(wire::kRead, r.link, 0, r.offset, r.len),
                                         nullptr, peer);
      if (!s.ok()) return fail(s);
      inflight.push_back(next);
    }
    if (inflight.empty()) {
      std::unique_lock<std::mutex> l(smu_);
      if (next_send_ >= plan_.size()) return;  // all asked for and received
      scv_.wait(l, [&] { return stop_ || ready_.size() < kWindow; });
      if (stop_) return;
      continue;
    }
    size_t idx = inflight.front();
    inflight.pop_front();
    wire::Header h{};
    absl::Status s = wire::RecvHeader(sfd_.get(), &h, peer);
    if (s.ok() && (h.op != wire::kOk || h.len != plan_[idx].len)) {
      s = absl::DataLossError(absl::StrCat(peer, ": unexpected answer to a read-ahead request"));
    }
    std::vector<char> buf;
    {
      std::lock_guard<std::mutex> l(smu_);
      if (!spare_.empty()) {
        buf = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (s.ok()) {
      if (buf.size() < h.len) buf.resize(h.len);  // kept larger: the reader copies only the block's length
      s = wire::RecvAll(sfd_.get(), buf.data(), h.len, peer);
    }
    if (!s.ok()) return fail(s);
    std::lock_guard<std::mutex> l(smu_);
    if (idx >= consumed_) {
      state_[idx] = kReady;
      ready_[idx] = std::move(buf);
    } else {
      state_[idx] = kGone;
      spare_.push_back(std::move(buf));
    }
    scv_.notify_all();
  }
}

absl::Status PageClient::Done(uint64_t handlers) {
  {
    std::lock_guard<std::mutex> l(smu_);
    CAIRN_LOG_DEBUG("event=page_client_done server={} streamed={} direct={} waited_for_stream_s={:.3f}", server_,
                    stream_hits_, direct_reads_, stream_wait_s_);
  }
  std::lock_guard<std::mutex> l(mu_);
  std::string none;
  return Request(fd_.get(), wire::kDone, 0, 0, 0, handlers, &none, nullptr, 0);
}

absl::StatusOr<std::unique_ptr<image::ImageReader>> OpenImage(const ImageSource& src, uint64_t who) {
  if (!src.remote()) return image::OpenChain(src.dir);
  ASSIGN_OR_RETURN(std::shared_ptr<PageClient> c, PageClient::Connect(src.server, src.token_file, who));
  return c->OpenChain(c);
}

PageClient* ClientOf(const image::ImageReader& img) {
  auto* s = dynamic_cast<LinkSource*>(img.page_source());
  return s ? s->client() : nullptr;
}

}  // namespace cairn::lazy
