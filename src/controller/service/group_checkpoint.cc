#include "controller/service/group_checkpoint.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace cairn::controller {
namespace {

namespace dapi = ::cairn::daemon::api;
using Stream = grpc::ClientReaderWriter<dapi::RankCheckpointMessage, dapi::RankCheckpointReply>;

// One rank's stream and where it stands.
struct Rank {
  const RankTarget* target = nullptr;
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> stream;
  std::optional<RankPart> part;  // set once prepared
  std::string error;             // set when it failed
};

std::string Describe(const RankRef& r) {
  return absl::StrCat("rank ", r.rank, " (job ", r.job_id, " on ", r.node_id, ")");
}

// Why the stream ended: the daemon's own words when it refused.
std::string Ended(Rank& r) {
  grpc::Status st = r.stream->Finish();
  if (st.ok()) return "its daemon ended the stream without a reply";
  return absl::StrCat(st.error_message(), " (gRPC code ", st.error_code(), ")");
}

}  // namespace

absl::StatusOr<std::vector<RankPart>> RunGroupCheckpoint(
    const std::string& group, const std::string& id, const std::vector<RankTarget>& targets,
    const GroupCheckpointOptions& opts, const std::function<absl::Status(const std::vector<RankPart>&)>& record) {
  if (targets.empty()) return absl::FailedPreconditionError(absl::StrCat("group ", group, " has no rank"));
  std::vector<std::unique_ptr<Rank>> ranks;
  for (const RankTarget& t : targets) {
    auto r = std::make_unique<Rank>();
    r->target = &t;
    // The whole exchange: the slowest dump, the wait for the decision, the release.
    r->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::duration<double>(opts.prepare_timeout_s + opts.decide_timeout_s + 60)));
    if (t.authorize) t.authorize(r->ctx);
    ranks.push_back(std::move(r));
  }

  // Phase 1, every rank at once: prepared or failed.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (auto& rp : ranks) {
    threads.emplace_back([&opts, &group, &id, r = rp.get()] {
      const RankRef& ref = r->target->ref;
      r->stream = r->target->stub->CheckpointRank(&r->ctx);
      dapi::RankCheckpointMessage m;
      dapi::RankCheckpointMessage::Prepare* p = m.mutable_prepare();
      p->set_name(ref.job_id);
      p->set_group(group);
      p->set_group_checkpoint(id);
      p->set_kill(opts.stop);
      p->set_decide_timeout_s(opts.decide_timeout_s);
      dapi::RankCheckpointReply reply;
      if (!r->stream->Write(m) || !r->stream->Read(&reply)) {
        r->error = Ended(*r);
        return;
      }
      if (reply.state() != "prepared") {
        r->error = absl::StrCat("unexpected reply '", reply.state(), "'");
        r->ctx.TryCancel();
        (void)r->stream->Finish();
        return;
      }
      RankPart part;
      part.ref = ref;
      part.checkpoint = reply.checkpoint().id();
      part.location = reply.checkpoint().location();
      part.dump_s = reply.dump_s();
      r->part = part;
    });
  }
  for (std::thread& t : threads) t.join();
  threads.clear();
  auto prepared_at = std::chrono::steady_clock::now();

  std::vector<std::string> failures;
  std::vector<RankPart> parts;
  for (auto& r : ranks) {
    if (!r->error.empty()) failures.push_back(absl::StrCat(Describe(r->target->ref), ": ", r->error));
    if (r->part) parts.push_back(*r->part);
  }
  absl::Status recorded = absl::OkStatus();
  if (failures.empty()) {
    recorded = record(parts);
    if (!recorded.ok()) failures.push_back(absl::StrCat("the controller could not record it: ", recorded.message()));
  }
  const bool commit = failures.empty();
  CAIRN_LOG_INFO("event=group_checkpoint group={} id={} ranks={} prepared_ms={:.1f} decision={}", group, id,
                 ranks.size(),
                 std::chrono::duration<double, std::milli>(prepared_at - t0).count(), commit ? "commit" : "abort");

  // Phase 2: the decision to every rank that prepared, at once.
  for (auto& rp : ranks) {
    if (!rp->part) continue;
    threads.emplace_back([commit, r = rp.get()] {
      dapi::RankCheckpointMessage m;
      m.mutable_decide()->set_commit(commit);
      dapi::RankCheckpointReply reply;
      bool ok = r->stream->Write(m);
      r->stream->WritesDone();
      if (ok && r->stream->Read(&reply) && reply.state() == "done") {
        r->part->frozen_s = reply.frozen_s();
        r->part->location = reply.checkpoint().location();  // in the node's store by now
        (void)r->stream->Finish();
        return;
      }
      std::string why = Ended(*r);
      // Called off: the rank's refusal to go on is the expected answer (it thawed).
      if (commit) r->error = why;
    });
  }
  for (std::thread& t : threads) t.join();

  if (!commit) {
    return absl::AbortedError(absl::StrCat("group checkpoint ", id, " of group ", group,
                                           " was called off; every rank runs on untouched: ",
                                           absl::StrJoin(failures, "; ")));
  }
  parts.clear();
  for (auto& r : ranks) {
    // A rank that was told to commit and did not confirm: its part is complete on its node
    // (it was prepared), and it runs on (its stream broke: its daemon thawed it).
    if (!r->error.empty()) {
      CAIRN_LOG_WARN("event=group_rank_unconfirmed group={} id={} rank={} error=\"{}\"", group, id, r->target->ref.rank,
                     r->error);
    }
    parts.push_back(*r->part);
  }
  return parts;
}

}  // namespace cairn::controller
