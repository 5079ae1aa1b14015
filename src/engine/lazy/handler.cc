#include "engine/lazy/handler.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/pass_fd.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/dump/tracker.h"
#include "engine/image/chain.h"
#include "engine/lazy/fuse.h"
#include "engine/lazy/lazy_areas.h"
#include "engine/lazy/page_client.h"

namespace cairn::lazy {
namespace {

constexpr uint64_t kPage = 4096;

// Pages still to copy, in the process's current addresses: start -> (end, where the first
// page was at checkpoint time).
struct Seg {
  uint64_t end = 0, src = 0;
};
using Segs = std::map<uint64_t, Seg>;

// Removes [a, b) from `s`.
void Carve(Segs& s, uint64_t a, uint64_t b, std::vector<std::pair<uint64_t, Seg>>* removed = nullptr) {
  auto it = s.upper_bound(a);
  if (it != s.begin()) {
    --it;
    if (it->second.end <= a) ++it;
  }
  while (it != s.end() && it->first < b) {
    uint64_t s0 = it->first;
    Seg g = it->second;
    it = s.erase(it);
    if (s0 < a) s[s0] = {a, g.src};
    if (g.end > b) s[b] = {g.end, g.src + (b - s0)};
    uint64_t c0 = std::max(s0, a), c1 = std::min(g.end, b);
    if (removed) removed->push_back({c0, {c1, g.src + (c0 - s0)}});
  }
}

Segs::iterator Containing(Segs& s, uint64_t addr) {
  auto it = s.upper_bound(addr);
  if (it == s.begin()) return s.end();
  --it;
  return addr < it->second.end ? it : s.end();
}

struct Ctx {
  UniqueFd fd;
  Segs pending;
  bool gone = false;
  uint64_t stale_page = 0;  // the page UFFDIO_COPY last found no area at...
  int stale_tries = 0;      // ...and how often in a row
};

// How often a page whose area is not there is tried again (after reading the queued events)
// before it is dropped: ~0.1 s of retries.
constexpr int kMaxStaleTries = 1000;

enum class Outcome { kOk, kAgain, kGone };

// Wakes the threads waiting on a fault at `page` (needs no area: UFFDIO_WAKE only wakes).
void Wake(Ctx& c, uint64_t page) {
  uffdio_range r{page, kPage};
  ::ioctl(c.fd.get(), UFFDIO_WAKE, &r);
}

uint64_t StoredLength(const image::PageBlock& b) {
  return b.codec() != image::PageBlock::NONE ? b.stored_length() : b.length();
}

void KillTree(pid_t pid, int depth);

// How long the process must go without a fault before prefetch takes the handler again.
constexpr std::chrono::milliseconds kFaultQuiet{2};

// The handler's watcher (handler.h): a child of the handler that holds a second reference to
// every userfaultfd the handler serves. A userfaultfd whose last reference is closed leaves
// its ranges as ordinary memory, where a page not yet copied in reads as zeros: if the handler
// died with pages missing, the process would run on with wrong memory and never know. With the
// watcher's reference the ranges stay registered (a fault on a missing page waits), and the
// watcher, seeing the handler gone (end of file on their socket) without its "finished",
// kills the process and says why. What it cannot cover alone: the watcher killed together with
// the handler (a SIGKILL aimed at both); the fuse it holds with the handler covers that in a job.
class Watcher {
 public:
  // Forks the watcher, which holds `uffd` (and `fuse`, the fuse's write end, if not -1) and
  // watches `pid` (its start time taken now).
  absl::Status Start(int uffd, int fuse, pid_t pid) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoStatus("socketpair (watcher)");
    uint64_t start = dump::ProcessStartTime(pid).value_or(0);
    pid_t child = ::fork();
    if (child < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      return ErrnoStatus("fork the page handler's watcher");
    }
    if (child == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_IGN);
      ::prctl(PR_SET_NAME, "cairn-lazywatch", 0, 0, 0);
      // Keeps only its socket, the userfaultfd, the fuse and stdin/out/err.
      int sock = sv[1];
      CloseAllDescriptorsBut({sock, uffd, fuse});
      std::vector<int> held = {uffd};
      ::_exit(Watch(sock, pid, start, &held));
    }
    ::close(sv[1]);
    sock_ = UniqueFd(sv[0]);
    pid_ = child;
    return absl::OkStatus();
  }
  // Another userfaultfd served from now on (a child the process forked).
  void Add(int uffd) { Send('f', uffd); }
  // The handler is done (every page in, or it killed the process itself): nothing to do.
  void Finished() {
    Send('d', -1);
    sock_.Reset();
    if (pid_ > 0) {
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
  }

 private:
  void Send(char what, int fd) {
    if (sock_.valid()) (void)SendWithFd(sock_.get(), &what, 1, fd);
  }

  // The watcher's body: returns its exit code.
  static int Watch(int sock, pid_t pid, uint64_t start, std::vector<int>* held) {
    for (;;) {
      char what = 0;
      msghdr msg{};
      iovec iov{&what, 1};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
      msg.msg_control = ctl;
      msg.msg_controllen = sizeof ctl;
      ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0 && what == 'd') return 0;
      if (n > 0) {
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
          if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
            held->push_back(fd);
          }
        }
        continue;
      }
      break;  // end of file (or an error): the handler is gone without finishing
    }
    if (start != 0 && dump::ProcessStartTime(pid).value_or(0) == start) {
      ::kill(pid, SIGSTOP);
      KillTree(pid, 0);
      std::string line = absl::StrCat(
          "cairn: error: lazy restore of pid ", pid, " failed; the process was killed: its page handler died before "
          "every page was in (its missing pages would have read as zeros)\n");
      (void)!::write(STDERR_FILENO, line.data(), line.size());
    }
    return 1;
  }

  UniqueFd sock_;
  pid_t pid_ = -1;
};

class Handler {
 public:
  explicit Handler(const HandlerOptions& opts) : opts_(opts) {}

  absl::Status Run();

 private:
  absl::Status Setup();
  absl::Status StartReadAhead(PageClient& client);
  absl::Status HandleEvents(Ctx& c, bool* had);
  absl::StatusOr<Outcome> FillAt(Ctx& c, Segs::iterator seg, uint64_t target, bool prefetch = false);
  absl::StatusOr<Outcome> FillChunk(Ctx& c, Segs::iterator seg, uint64_t target, const image::Piece& p, uint64_t ps);
  absl::StatusOr<Outcome> ServeFault(Ctx& c, uint64_t addr);
  absl::StatusOr<Outcome> Copy(Ctx& c, uint64_t dst, const char* src, uint64_t len);
  void KillAll();

  HandlerOptions opts_;
  std::unique_ptr<image::ImageReader> img_;
  std::map<uint64_t, image::Piece> pieces_;  // by the address of its first page at checkpoint time
  std::vector<std::unique_ptr<Ctx>> ctxs_;
  Watcher watcher_;
  std::unique_ptr<char[]> buf_;  // not zeroed: its pages are touched only as blocks are read
  std::unique_ptr<char[]> chunk_{new char[image::kChecksumChunk]};  // one chunk a fault read
  std::vector<char> streamed_;   // a block taken from a page server's read-ahead stream
  const char* block_ = nullptr;  // the bytes of cached_: buf_ or streamed_
  const image::PageBlock* cached_ = nullptr;
  uint64_t faults_ = 0, copied_ = 0;
  // When the process last faulted, and the fault count once it had been quiet for kFaultQuiet.
  std::chrono::steady_clock::time_point last_fault_;
  uint64_t quiet_from_faults_ = 0;
};

absl::Status Handler::Setup() {
  ASSIGN_OR_RETURN(img_, OpenImage({opts_.dir, opts_.page_server, opts_.token_file}, opts_.image_pid));
  const image::Process* proc = image::FindProcess(img_->meta(), opts_.image_pid);
  if (!proc) return absl::NotFoundError(absl::StrCat(opts_.dir, " holds no process ", opts_.image_pid));
  auto c = std::make_unique<Ctx>();
  c->fd = UniqueFd(opts_.uffd);
  uint64_t max_block = 0;
  for (LazyArea& a : LazyAreas(*img_, *proc)) {
    for (const image::Piece& p : a.pieces) {
      uint64_t va = p.block->vaddr() + p.offset;
      if (p.len % kPage != 0 || va % kPage != 0 || va < a.vma->start() || va + p.len > a.vma->end()) {
        return absl::DataLossError(absl::StrFormat("%s: block at %#x lies outside its area (corrupt image)",
                                                   p.image->dir(), p.block->vaddr()));
      }
      pieces_[va] = p;
      c->pending[va] = {va + p.len, va};
      max_block = std::max<uint64_t>(max_block, p.block->length());
    }
  }
  if (max_block > (64u << 20)) {
    return absl::DataLossError(absl::StrCat(opts_.dir, ": a page block of ", max_block,
                                            " bytes is larger than any cairn writes (corrupt image)"));
  }
  buf_.reset(new char[max_block]);
  int fl = ::fcntl(c->fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(c->fd.get(), F_SETFL, fl | O_NONBLOCK) != 0) return ErrnoStatus("fcntl userfaultfd");
  ctxs_.push_back(std::move(c));
  return absl::OkStatus();
}

// The blocks prefetch will read, in the order it reads them (address order, as pending is).
absl::Status Handler::StartReadAhead(PageClient& client) {
  std::vector<PageClient::Range> plan;
  for (const auto& [va, p] : pieces_) {
    int link = client.LinkOf(p.image);
    if (link < 0) continue;
    PageClient::Range r{static_cast<uint32_t>(link), p.block->file_offset(), StoredLength(*p.block)};
    if (!plan.empty() && plan.back().link == r.link && plan.back().offset == r.offset) continue;
    plan.push_back(r);
  }
  return client.ReadAhead(std::move(plan));
}

void KillTree(pid_t pid, int depth) {
  if (depth > 64) return;
  ::kill(pid, SIGKILL);
  std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = ::opendir(task_dir.c_str());
  if (!d) return;
  std::vector<pid_t> kids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(task_dir + "/" + e->d_name + "/children");
    pid_t k;
    while (in >> k) kids.push_back(k);
  }
  ::closedir(d);
  for (pid_t k : kids) KillTree(k, depth + 1);
}

void Handler::KillAll() {
  // The process first, so that it cannot fork again while its children are found.
  ::kill(opts_.pid, SIGSTOP);
  KillTree(opts_.pid, 0);
}

absl::StatusOr<Outcome> Handler::Copy(Ctx& c, uint64_t dst, const char* src, uint64_t len) {
  uint64_t done = 0;
  bool by_page = false;
  while (done < len) {
    uffdio_copy cp{};
    cp.dst = dst + done;
    cp.src = reinterpret_cast<uint64_t>(src + done);
    cp.len = by_page ? kPage : len - done;
    int rc = ::ioctl(c.fd.get(), UFFDIO_COPY, &cp);
    if (rc == 0 || cp.copy > 0) {
      uint64_t n = rc == 0 ? cp.len : static_cast<uint64_t>(cp.copy);
      Carve(c.pending, dst + done, dst + done + n);
      copied_ += n;
      done += n;
      continue;
    }
    int err = errno;
    if (err == EEXIST) {  // already there: a thread that faulted on it may still wait
      Carve(c.pending, dst + done, dst + done + kPage);
      Wake(c, dst + done);
      done += kPage;
      continue;
    }
    if (err == ENOENT || err == EFAULT) {
      // The range must lie in one area: the process may have split, shrunk or moved it since
      // (mremap, munmap, mprotect). Page by page, each page's own fate shows.
      if (!by_page && len - done > kPage) {
        by_page = true;
        continue;
      }
      // This page's area is gone or moved: its event (unmap, remap) is queued, and the process
      // waits until it is read. Read it first; a page that stays unreachable is dropped.
      uint64_t page = dst + done;
      if (page != c.stale_page) c.stale_page = page, c.stale_tries = 0;
      if (++c.stale_tries <= kMaxStaleTries) return Outcome::kAgain;
      c.stale_page = 0, c.stale_tries = 0;
      Carve(c.pending, page, page + kPage);
      Wake(c, page);
      done += kPage;
      continue;
    }
    if (err == EAGAIN) return Outcome::kAgain;  // the layout is changing: read the events first
    if (err == ESRCH) return Outcome::kGone;    // the process exited
    return ErrnoStatus(absl::StrFormat("UFFDIO_COPY to %#x in pid %d", dst + done, opts_.pid));
  }
  return Outcome::kOk;
}

// Copies the pending pages around `target` (inside `seg`) that one stored block holds.
absl::StatusOr<Outcome> Handler::FillAt(Ctx& c, Segs::iterator seg, uint64_t target, bool prefetch) {
  uint64_t s0 = seg->first;
  Seg g = seg->second;
  uint64_t src = g.src + (target - s0);
  auto pit = pieces_.upper_bound(src);
  if (pit == pieces_.begin()) return absl::InternalError(absl::StrFormat("no saved page for %#x", src));
  --pit;
  const image::Piece& p = pit->second;
  uint64_t ps = pit->first, pe = ps + p.len;
  if (src >= pe) return absl::InternalError(absl::StrFormat("no saved page for %#x", src));
  uint64_t from = std::max(ps, g.src), to = std::min(pe, g.src + (g.end - s0));
  if (cached_ != p.block) {
    // Prefetch goes in address order: the read-ahead stream may drop what lies before this block.
    PageClient* client = ClientOf(*img_);
    int link = client ? client->LinkOf(p.image) : -1;
    PageClient::Range r{static_cast<uint32_t>(link), p.block->file_offset(), StoredLength(*p.block)};
    if (link >= 0 && prefetch) client->SkipTo(r);
    bool streamed = link >= 0 && p.block->codec() == image::PageBlock::NONE && client->Take(r, &streamed_);
    if (!prefetch && !streamed && image::ImageReader::HasChunks(*p.block)) {
      // A fault on a block not read yet: only the chunk holding the page, read and checked alone
      // (64 KiB, not the block: a program touching its memory at random waits for each fault).
      return FillChunk(c, seg, target, p, ps);
    }
    cached_ = nullptr;
    absl::Status read;
    if (streamed) {
      block_ = streamed_.data();  // no copy out of the stream's buffer
      read = p.image->CheckBlock(*p.block, block_);
    } else {
      block_ = buf_.get();
      read = p.image->ReadBlock(*p.block, buf_.get());
    }
    if (!read.ok()) {
      return Annotate(read, absl::StrFormat("page %#x of pid %d (saved at %#x) cannot be delivered", target,
                                            opts_.pid, src));
    }
    cached_ = p.block;
  }
  const char* data = block_ + p.offset + (from - ps);
  return Copy(c, s0 + (from - g.src), data, to - from);
}

absl::StatusOr<Outcome> Handler::FillChunk(Ctx& c, Segs::iterator seg, uint64_t target, const image::Piece& p,
                                            uint64_t ps) {
  uint64_t s0 = seg->first;
  Seg g = seg->second;
  uint64_t src = g.src + (target - s0);
  uint64_t pe = ps + p.len;
  uint64_t from = std::max(ps, g.src), to = std::min(pe, g.src + (g.end - s0));
  // In the block's own offsets: the piece starts at p.offset, as `ps` in the saved addresses.
  uint64_t k = (p.offset + (src - ps)) / image::kChecksumChunk;
  absl::StatusOr<uint64_t> len = p.image->ReadChunk(*p.block, k, chunk_.get());
  if (!len.ok()) {
    return Annotate(len.status(), absl::StrFormat("page %#x of pid %d (saved at %#x) cannot be delivered", target,
                                                  opts_.pid, src));
  }
  uint64_t cs = k * image::kChecksumChunk, ce = cs + *len;
  uint64_t lo = std::max(p.offset + (from - ps), cs), hi = std::min(p.offset + (to - ps), ce);
  uint64_t at = ps + (lo - p.offset);  // saved address of the first byte copied
  return Copy(c, s0 + (at - g.src), chunk_.get() + (lo - cs), hi - lo);
}

absl::StatusOr<Outcome> Handler::ServeFault(Ctx& c, uint64_t addr) {
  if (++faults_ == 1) CAIRN_LOG_DEBUG("event=lazy_first_fault pid={} addr={:#x}", opts_.pid, addr);
  uint64_t page = addr & ~(kPage - 1);
  auto seg = Containing(c.pending, page);
  if (seg != c.pending.end()) return FillAt(c, seg, page);
  // Not saved (zero at checkpoint time), dropped since, or already copied.
  uffdio_zeropage z{};
  z.range.start = page;
  z.range.len = kPage;
  if (::ioctl(c.fd.get(), UFFDIO_ZEROPAGE, &z) == 0) return Outcome::kOk;
  if (errno == EEXIST) {
    Wake(c, page);
    return Outcome::kOk;
  }
  if (errno == EAGAIN) return Outcome::kAgain;
  if (errno == ESRCH) return Outcome::kGone;
  if (errno == ENOENT || errno == EFAULT) {  // the area is gone: the faulting thread retries and sees that
    Wake(c, page);
    return Outcome::kOk;
  }
  return ErrnoStatus(absl::StrFormat("UFFDIO_ZEROPAGE at %#x in pid %d", page, opts_.pid));
}

// Reads and handles every queued message of `c`; sets *had when there was one.
absl::Status Handler::HandleEvents(Ctx& c, bool* had) {
  uffd_msg msgs[64];
  for (;;) {
    ssize_t n = ::read(c.fd.get(), msgs, sizeof msgs);
    if (n < 0) {
      if (errno == EAGAIN) return absl::OkStatus();
      if (errno == EINTR) continue;
      return ErrnoStatus("read userfaultfd");
    }
    if (n == 0) return absl::OkStatus();
    *had = true;
    std::vector<uint64_t> faults;
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); ++i) {
      const uffd_msg& m = msgs[i];
      switch (m.event) {
        case UFFD_EVENT_PAGEFAULT:
          faults.push_back(m.arg.pagefault.address);
          break;
        case UFFD_EVENT_FORK: {
          auto child = std::make_unique<Ctx>();
          child->fd = UniqueFd(static_cast<int>(m.arg.fork.ufd));
          watcher_.Add(child->fd.get());
          child->pending = c.pending;
          int fl = ::fcntl(child->fd.get(), F_GETFL);
          ::fcntl(child->fd.get(), F_SETFL, fl | O_NONBLOCK);
          CAIRN_LOG_DEBUG("event=lazy_fork pid={} pending_ranges={}", opts_.pid, child->pending.size());
          ctxs_.push_back(std::move(child));
          break;
        }
        case UFFD_EVENT_REMAP: {
          uint64_t from = m.arg.remap.from, to = m.arg.remap.to, len = m.arg.remap.len;
          std::vector<std::pair<uint64_t, Seg>> moved;
          Carve(c.pending, from, from + len, &moved);
          for (auto& [s, g] : moved) c.pending[s - from + to] = {g.end - from + to, g.src};
          break;
        }
        case UFFD_EVENT_REMOVE:
          Carve(c.pending, m.arg.remove.start, m.arg.remove.end);
          break;
        case UFFD_EVENT_UNMAP:
          Carve(c.pending, m.arg.remove.start, m.arg.remove.end);
          break;
        default:
          return absl::InternalError(absl::StrCat("unexpected userfaultfd event ", static_cast<int>(m.event)));
      }
    }
    for (uint64_t a : faults) {
      for (;;) {
        ASSIGN_OR_RETURN(Outcome o, ServeFault(c, a));
        if (o == Outcome::kGone) {
          c.gone = true;
          return absl::OkStatus();
        }
        if (o == Outcome::kOk) break;
        // The layout changes under us: events queue up behind this fault; take them first.
        bool more = false;
        RETURN_IF_ERROR(HandleEvents(c, &more));
        if (c.gone) return absl::OkStatus();
        if (!more) ::usleep(100);
      }
    }
  }
}

absl::Status Handler::Run() {
  auto t0 = std::chrono::steady_clock::now();
  absl::Status s = Setup();
  if (s.ok()) s = watcher_.Start(ctxs_[0]->fd.get(), opts_.fuse_write, opts_.pid);
  if (!s.ok()) {
    ::close(opts_.ready_fd);
    return s;
  }
  CAIRN_LOG_DEBUG("event=lazy_ready pid={} setup_seconds={:.4f}", opts_.pid,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  char one = 1;
  (void)::write(opts_.ready_fd, &one, 1);
  ::close(opts_.ready_fd);
  auto fatal = [&](absl::Status st) {
    // Said before the kill: whoever waits for the process (an attached `cairn restore`) finds
    // the reason already written when it sees the process die.
    st = Annotate(st, absl::StrCat("lazy restore of pid ", opts_.pid, " failed; the process was killed"));
    std::fprintf(stderr, "cairn: error: %s\n", std::string(st.message()).c_str());
    std::fflush(stderr);
    KillAll();
    watcher_.Finished();
    return st;
  };
  UniqueFd go(opts_.go_fd);
  for (;;) {
    bool work_left = false;
    for (auto& c : ctxs_) work_left = work_left || (!c->gone && !c->pending.empty());
    if (!work_left) break;
    std::vector<pollfd> pfds;
    for (auto& c : ctxs_) pfds.push_back({c->fd.get(), POLLIN, 0});
    if (go.valid()) pfds.push_back({go.get(), POLLIN, 0});
    // Until the process runs, only faults are served (poll waits); then prefetch fills the gaps,
    // but only once the process has not faulted for kFaultQuiet: a program touching its memory
    // faults again microseconds after each fault is served, and a block of prefetch copied in
    // between would make every one of those faults wait for it.
    int timeout = go.valid() ? -1 : 0;
    if (!go.valid() && faults_ != quiet_from_faults_) {
      auto since = std::chrono::steady_clock::now() - last_fault_;
      if (since < kFaultQuiet) {
        timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(kFaultQuiet - since).count());
      } else {
        quiet_from_faults_ = faults_;
      }
    }
    if (::poll(pfds.data(), pfds.size(), timeout) < 0 && errno != EINTR) {
      return fatal(ErrnoStatus("poll userfaultfd"));
    }
    if (go.valid() && pfds.back().revents) {
      go.Reset();
      // The process runs: stream what prefetch will copy (not earlier: the restore needs the
      // CPU and the link until then).
      if (PageClient* client = ClientOf(*img_)) {
        if (absl::Status st = StartReadAhead(*client); !st.ok()) return fatal(st);
      }
    }
    bool had = false;
    for (size_t i = 0; i < ctxs_.size(); ++i) {
      if (ctxs_[i]->gone || !(pfds[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      if (absl::Status e = HandleEvents(*ctxs_[i], &had); !e.ok()) return fatal(e);
    }
    if (had) last_fault_ = std::chrono::steady_clock::now();
    if (had || go.valid() || timeout > 0) continue;
    // Nothing asked for: prefetch one block's worth.
    for (auto& c : ctxs_) {
      if (c->gone || c->pending.empty()) continue;
      auto seg = c->pending.begin();
      auto o = FillAt(*c, seg, seg->first, /*prefetch=*/true);
      if (!o.ok()) return fatal(o.status());
      if (*o == Outcome::kGone) c->gone = true;
      if (*o == Outcome::kAgain) ::usleep(100);
      break;
    }
  }
  // Every page is in: the process no longer needs its fuse (disarmed before either holder of
  // its write end may exit).
  if (opts_.fuse_read >= 0) DisarmFuse(opts_.fuse_read);
  watcher_.Finished();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAIRN_LOG_INFO("event=lazy_done pid={} bytes={} faults={} seconds={:.3f}", opts_.pid, copied_, faults_, secs);
  if (PageClient* client = ClientOf(*img_)) {
    if (absl::Status d = client->Done(0); !d.ok()) CAIRN_LOG_WARN("event=lazy_done_not_told why=\"{}\"", std::string(d.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServePages(const HandlerOptions& opts) {
  Handler h(opts);
  absl::Status s = h.Run();
  if (!s.ok() && !absl::StrContains(s.message(), "the process was killed")) {
    std::fprintf(stderr, "cairn: error: %s\n", std::string(s.message()).c_str());
  }
  return s;
}

}  // namespace cairn::lazy
