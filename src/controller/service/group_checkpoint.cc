#include "controller/service/group_checkpoint.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/thread_nice.h"

namespace cairn::controller {
namespace {

namespace dapi = ::cairn::daemon::api;
using Stream = grpc::ClientReaderWriter<dapi::RankCheckpointMessage, dapi::RankCheckpointReply>;

// One rank's stream and where it stands.
struct Rank {
  const RankTarget* target = nullptr;
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> stream;
  bool ready = false;
  std::optional<RankPart> part;  // set once prepared
  bool done = false;             // its daemon confirmed the decision
  std::chrono::steady_clock::time_point prepared_at;
  bool decision_sent = false;    // the decision reached its stream
  std::string error;             // set when it failed
};

std::string Describe(const RankRef& r) {
  return absl::StrCat("rank ", r.rank, " (job ", r.job_id, " on ", r.node_id, ")");
}

// Why a stream ended with `st`: the daemon's own words when it refused.
std::string Why(const grpc::Status& st) {
  if (st.ok()) return "its daemon ended the stream without a reply";
  return absl::StrCat(st.error_message(), " (gRPC code ", st.error_code(), ")");
}

// Ends the stream; why it ended.
std::string Ended(Rank& r) { return Why(r.stream->Finish()); }

// Runs `fn` on every rank, each on its own thread (at the caller's priority), and waits for all.
void ForEach(std::vector<std::unique_ptr<Rank>>& ranks, const std::function<void(Rank&)>& fn) {
  std::vector<std::thread> threads;
  const int nice = ThreadNice::Current();
  for (auto& r : ranks) {
    threads.emplace_back([&fn, p = r.get(), nice] {
      ThreadNice same(nice);
      fn(*p);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Reads the reply `state` from `r`; false (with r.error set) otherwise.
bool Expect(Rank& r, const std::string& state, dapi::RankCheckpointReply* reply) {
  if (!r.stream->Read(reply)) {
    r.error = Ended(r);
    return false;
  }
  if (reply->state() != state) {
    r.error = absl::StrCat("unexpected reply '", reply->state(), "' where '", state, "' was due");
    r.ctx.TryCancel();
    (void)r.stream->Finish();
    return false;
  }
  return true;
}

// Sends `m` to `r`; false (with r.error set) when the stream broke.
bool Send(Rank& r, const dapi::RankCheckpointMessage& m) {
  if (r.stream->Write(m)) return true;
  r.error = Ended(r);
  return false;
}

dapi::RankCheckpointMessage Decide(bool commit) {
  dapi::RankCheckpointMessage m;
  m.mutable_decide()->set_commit(commit);
  return m;
}

// Where every rank's thread must arrive before any goes on: the last to arrive runs `last` (the
// others wait meanwhile), then all go on.
class Rendezvous {
 public:
  explicit Rendezvous(size_t n) : left_(n) {}
  void Arrive(const std::function<void()>& last) {
    std::unique_lock<std::mutex> l(mu_);
    if (--left_ == 0) {
      last();
      cv_.notify_all();
      return;
    }
    cv_.wait(l, [&] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;
};

// Removes the part a rank committed before the group checkpoint was called off.
void DropPart(const Rank& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (r.target->authorize) r.target->authorize(ctx);
  dapi::DeleteCheckpointRequest req;
  req.set_id(r.part->checkpoint);
  dapi::DeleteCheckpointResponse resp;
  grpc::Status st = r.target->stub->DeleteCheckpoint(&ctx, req, &resp);
  if (!st.ok()) {
    CAIRN_LOG_WARN("event=group_part_not_removed rank={} checkpoint={} error=\"{}\"", r.target->ref.rank,
                   r.part->checkpoint, st.error_message());
  }
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
    // The whole exchange: the slowest dump, the waits, the release.
    r->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::duration<double>(opts.prepare_timeout_s + opts.decide_timeout_s + 60)));
    if (t.authorize) t.authorize(r->ctx);
    ranks.push_back(std::move(r));
  }
  auto failures = [&] {
    std::vector<std::string> out;
    for (auto& r : ranks) {
      if (!r->error.empty()) out.push_back(absl::StrCat(Describe(r->target->ref), ": ", r->error));
    }
    return out;
  };
  auto called_off = [&](const std::vector<std::string>& why) {
    return absl::AbortedError(absl::StrCat("group checkpoint ", id, " of group ", group,
                                           " was called off; every rank runs on untouched: ", absl::StrJoin(why, "; ")));
  };

  // One thread per rank for the whole exchange. Where every rank must have answered before any
  // goes on, the rank that answers last does what comes next for all of them, from its own
  // thread: the Freeze and the decision reach every rank at once, with no other thread to
  // start or wake on the way (writes of a few bytes each, ~0.1 ms for four ranks).
  //
  // 1. Every rank checks what it can while it runs, and says it is ready to freeze. If one
  //    cannot, every rank that is ready is told to go on untouched.
  // 2. All freeze together (so that none stands frozen waiting for another's start), each is
  //    dumped and stays frozen.
  // 3. The decision, to every rank that prepared.
  auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t_freeze, prepared_at;
  // From the freeze until the decisions are out, every wait of these threads for a core is
  // the whole group's downtime: they run ahead of the machine's other work (ForEach's threads
  // take the priority of the thread that starts them).
  ThreadNice urgent(ThreadNice::kUrgent);
  Rendezvous all_ready(ranks.size()), all_prepared(ranks.size());
  std::vector<std::string> why;
  bool frozen = false;  // step 2 was started: the Freeze went out
  bool commit = false;
  auto freeze_all = [&] {
    why = failures();
    if (!why.empty()) return;
    t_freeze = std::chrono::steady_clock::now();
    frozen = true;
    dapi::RankCheckpointMessage freeze;
    freeze.mutable_freeze();
    for (auto& r : ranks) (void)Send(*r, freeze);
  };
  auto decide_for_all = [&] {
    prepared_at = std::chrono::steady_clock::now();
    std::vector<RankPart> parts;
    for (auto& r : ranks) {
      if (r->part) parts.push_back(*r->part);
    }
    why = failures();
    // A rank that waited for the decision as long as it may has thawed on its own: the cut is gone.
    for (auto& r : ranks) {
      if (!r->part) continue;
      double waited = std::chrono::duration<double>(prepared_at - r->prepared_at).count();
      if (waited > opts.decide_timeout_s - 5) {
        why.push_back(absl::StrCat(Describe(r->target->ref), ": waited ", static_cast<int>(waited),
                                   " s frozen for the slowest rank, which is as long as it may (it thaws on its own)"));
      }
    }
    // With --stop every part is durable now: recorded before any rank dies. A live group
    // checkpoint is recorded once every rank has committed after its thaw (4.).
    if (why.empty() && opts.stop) {
      if (absl::Status s = record(parts); !s.ok()) {
        why.push_back(absl::StrCat("the controller could not record it: ", s.message()));
      }
    }
    commit = why.empty();
    for (auto& r : ranks) {
      if (r->part) r->decision_sent = r->stream->Write(Decide(commit));
    }
  };
  ForEach(ranks, [&](Rank& r) {
    const RankRef& ref = r.target->ref;
    r.stream = r.target->stub->CheckpointRank(&r.ctx);
    dapi::RankCheckpointMessage m;
    dapi::RankCheckpointMessage::Prepare* p = m.mutable_prepare();
    p->set_name(ref.job_id);
    p->set_group(group);
    p->set_group_checkpoint(id);
    p->set_kill(opts.stop);
    p->set_decide_timeout_s(opts.decide_timeout_s);
    dapi::RankCheckpointReply reply;
    r.ready = Send(r, m) && Expect(r, "ready", &reply);
    all_ready.Arrive(freeze_all);
    if (!frozen) {
      if (!r.ready) return;
      // Called off before the freeze: the rank refuses to go on, and that is its answer.
      if (!r.stream->Write(Decide(false))) return;
      r.stream->WritesDone();
      (void)r.stream->Finish();
      return;
    }
    if (r.error.empty() && Expect(r, "prepared", &reply)) {
      r.prepared_at = std::chrono::steady_clock::now();
      RankPart part;
      part.ref = r.target->ref;
      part.checkpoint = reply.checkpoint().id();
      part.location = reply.checkpoint().location();
      part.dump_s = reply.dump_s();
      r.part = part;
    }
    all_prepared.Arrive(decide_for_all);
    if (!r.part) return;  // failed in step 2: no decision for it
    r.stream->WritesDone();
    if (r.decision_sent && r.stream->Read(&reply) && reply.state() == "done") {
      r.part->frozen_s = reply.frozen_s();
      r.part->location = reply.checkpoint().location();  // in the node's store by now
      r.done = true;
      (void)r.stream->Finish();
      return;
    }
    grpc::Status st = r.stream->Finish();
    if (commit) {
      r.error = Why(st);
    } else if (st.error_code() != grpc::StatusCode::ABORTED) {
      DropPart(r);  // the abort may not have reached it: its part goes all the same
    }
  });
  urgent.End();
  if (!frozen) return called_off(why);
  CAIRN_LOG_INFO("event=group_checkpoint group={} id={} ranks={} ready_ms={:.1f} prepared_ms={:.1f} decision={}", group,
                 id, ranks.size(), std::chrono::duration<double, std::milli>(t_freeze - t0).count(),
                 std::chrono::duration<double, std::milli>(prepared_at - t_freeze).count(), commit ? "commit" : "abort");
  if (!commit) {
    // Ranks that prepared were told to abort (their parts removed); one that failed in 2 has
    // none. Every rank runs on.
    return called_off(why);
  }
  std::vector<RankPart> parts;
  for (auto& r : ranks) parts.push_back(*r->part);
  if (opts.stop) {
    // Recorded before any rank died. A rank that did not confirm has its part complete on its
    // node (committed before it said prepared), but may run on (its daemon thawed it when the
    // stream broke): the group checkpoint stands, the stop is not sure.
    if (std::vector<std::string> unsure = failures(); !unsure.empty()) {
      return absl::UnknownError(absl::StrCat("group checkpoint ", id, " of group ", group,
                                             " is recorded, but not every rank confirmed it stopped (see that "
                                             "none runs before a restore): ",
                                             absl::StrJoin(unsure, "; ")));
    }
    return parts;
  }
  // 4. A live group checkpoint: every rank runs again; recorded only if every part is durable.
  why = failures();
  if (why.empty()) {
    if (absl::Status s = record(parts); !s.ok()) why.push_back(absl::StrCat("the controller could not record it: ", s.message()));
  }
  if (!why.empty()) {
    for (auto& r : ranks) {
      if (r->done) DropPart(*r);
    }
    return absl::AbortedError(absl::StrCat("group checkpoint ", id, " of group ", group,
                                           " failed after its ranks ran on (nothing recorded; every rank runs): ",
                                           absl::StrJoin(why, "; ")));
  }
  return parts;
}

}  // namespace cairn::controller
