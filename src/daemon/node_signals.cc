// cairnd's node-level signals: spot interruption notices, GPU health events and the status of
// the parts that watch for them (docs/daemon.md, "Node signals"). The watchers themselves live
// in spot_watch.h and gpu_watch.h; this is what the daemon does with what they see.

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "daemon/daemon.h"
#include "daemon/gpu_watch.h"

namespace cairn::daemon {
namespace {

double UnixSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }
double MonoSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void Daemon::SetComponentStatus(const std::string& component, const std::string& line) {
  {
    std::lock_guard<std::mutex> l(node_mu_);
    std::string& old = components_[component];
    if (old == line) return;
    old = line;
  }
  if (absl::StartsWith(line, "warning")) {
    CAIRN_LOG_WARN("node={} {}: {}", opts_.node, component, line);
    Event("", component + "-warning", line);
  } else {
    spdlog::info("node={} {}: {}", opts_.node, component, line);
  }
}

absl::Status Daemon::HearControllerTerm(uint64_t term, const std::string& what) {
  std::lock_guard<std::mutex> l(node_mu_);
  if (!controller_term_.has_value()) {
    ASSIGN_OR_RETURN(std::optional<std::string> stored, catalog_->GetSetting("controller_term"));
    uint64_t t = 0;
    if (stored.has_value() && !absl::SimpleAtoi(*stored, &t)) {
      return absl::DataLossError(absl::StrCat("catalog setting controller_term is not a number: ", *stored));
    }
    controller_term_ = t;
  }
  if (term < *controller_term_) {
    absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
        what, ": refused: it comes from a controller of term ", term, ", and a controller of term ", *controller_term_,
        " has taken the lead since (the caller was deposed; nothing was done)"));
    CAIRN_LOG_WARN("node={} {}", opts_.node, std::string(refused.message()));
    return refused;
  }
  if (term > *controller_term_) {
    // Stored before anything is done in its name: a restarted daemon still refuses the older one.
    RETURN_IF_ERROR(catalog_->PutSetting("controller_term", absl::StrCat(term)));
    controller_term_ = term;
  }
  return absl::OkStatus();
}

void Daemon::OnSpotNotice(const SpotNoticeInfo& n) {
  double now = UnixSeconds();
  api::SpotNotice notice;
  notice.set_cloud(n.cloud);
  notice.set_action(n.action);
  notice.set_deadline(n.deadline);
  notice.set_received(now);
  notice.set_detail(n.detail);
  {
    std::lock_guard<std::mutex> l(node_mu_);
    spot_notice_ = notice;
  }
  std::vector<std::string> running;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, s] : jobs_) {
      if (s.job.state() == "running") running.push_back(name);
    }
  }
  double left = n.deadline - now;
  Event("", "spot-notice",
        absl::StrFormat("%s announces %s of this node in %.0f s (at %s): %s; checkpointing %d running job(s) now",
                        n.cloud, n.action, left, absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(static_cast<int64_t>(n.deadline)), absl::UTCTimeZone()),
                        n.detail, running.size()));
  // A job busy with a periodic checkpoint gets its notice checkpoint after it, while the node lasts.
  CheckpointJobs(running, "spot-notice", /*pin=*/true, MonoSeconds() + std::max(0.0, left));
}

void Daemon::SetGpus(const std::vector<GpuDevice>& gpus) {
  std::lock_guard<std::mutex> l(node_mu_);
  gpus_ = gpus;
}

void Daemon::OnGpuSignal(const GpuSignal& s) {
  {
    std::lock_guard<std::mutex> l(node_mu_);
    gpu_events_.push_back(absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()), " ",
                                       s.detail));
    if (gpu_events_.size() > 20) gpu_events_.erase(gpu_events_.begin());
  }
  Event("", "gpu-" + s.kind, s.detail);
  if (!s.report) return;
  // The jobs on that GPU are checkpointed now (pinned), while it may still answer: the
  // controller's gpu-health rule then restores them elsewhere from it, or drains the node. Not
  // for the Xids a program causes itself (13 engine exception, 31 page fault, 43 stopped, 45
  // preempted: NVIDIA's Xid catalog), and once per GPU per 10 minutes (a failing GPU repeats).
  if (s.kind == "xid" && (s.xid == 13 || s.xid == 31 || s.xid == 43 || s.xid == 45)) return;
  {
    std::lock_guard<std::mutex> l(node_mu_);
    auto [it, first] = gpu_checkpointed_at_.emplace(s.device, MonoSeconds());
    if (!first && MonoSeconds() - it->second < 600) return;
    it->second = MonoSeconds();
  }
  std::vector<std::string> on_it;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, st] : jobs_) {
      if (st.job.state() != "running") continue;
      for (int d : st.job.gpu_devices()) {
        if (d == s.device) on_it.push_back(name);
      }
    }
  }
  if (on_it.empty()) return;
  bool under_way = false;
  {
    std::lock_guard<std::mutex> l(node_mu_);
    GpuCheckpointRun& run = gpu_checkpoints_[s.device];
    under_way = run.thread.joinable() && !run.done->load();
    if (!under_way) {
      if (run.thread.joinable()) run.thread.join();
      run.done = std::make_shared<std::atomic<bool>>(false);
      run.thread = std::thread([this, on_it, reason = "gpu-" + s.kind, done = run.done] {
        CheckpointJobs(on_it, reason, /*pin=*/true, MonoSeconds() + 30);
        done->store(true);
      });
    }
  }
  Event("", "gpu-checkpoint",
        under_way ? absl::StrFormat("GPU %d: %s; the checkpoint of its jobs from an earlier event is still under way",
                                    s.device, s.detail)
                  : absl::StrFormat("GPU %d: %s; checkpointing its %d job(s): %s", s.device, s.detail, on_it.size(),
                                    absl::StrJoin(on_it, ", ")));
}

void Daemon::FillNodeSignals(api::NodeInfoResponse* r) {
  std::lock_guard<std::mutex> l(node_mu_);
  for (const auto& [k, v] : components_) (*r->mutable_components())[k] = v;
  if (spot_notice_) *r->mutable_spot_notice() = *spot_notice_;
  r->set_gpus(static_cast<uint32_t>(gpus_.size()));
  if (!gpus_.empty()) r->set_gpu_type(GpuTypeOf(gpus_.front().name));
  for (const std::string& e : gpu_events_) r->add_gpu_events(e);
}

}  // namespace cairn::daemon
