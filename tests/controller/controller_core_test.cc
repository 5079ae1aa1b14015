// The controller core (src/controller/service/controller.h) with fakes of our own interfaces:
// an in-memory Store and a dispatcher that carries actions out. What these cover cannot be seen
// from outside yet: a dispatcher that does the work (cairnd's job, issue 5) and a store that
// deposes the leader mid-write.

#include <functional>
#include <map>
#include <mutex>
#include <set>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/cpu_levels.h"
#include "controller/service/controller.h"

namespace cairn::controller {
namespace {

class MemoryStore : public Store {
 public:
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = kv_.find(std::string(key));
    if (it == kv_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  absl::Status Put(absl::string_view key, absl::string_view value) override {
    std::lock_guard<std::mutex> l(mu_);
    if (deposed_) return absl::FailedPreconditionError("leader key names someone else");
    if (failing_) return absl::UnavailableError("disk unplugged");
    kv_[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  absl::Status Delete(absl::string_view key) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_.erase(std::string(key));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(absl::string_view prefix) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, v] : kv_) {
      if (absl::StartsWith(k, prefix)) out.emplace_back(k, v);
    }
    return out;
  }
  absl::StatusOr<Leadership> Campaign(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    return deposed_ ? Leadership{false, "someone-else"} : Leadership{true, id};
  }
  void Resign() override {}
  std::string Describe() const override { return "memory"; }

  void Depose() {
    std::lock_guard<std::mutex> l(mu_);
    deposed_ = true;
  }
  void FailWrites(bool f) {
    std::lock_guard<std::mutex> l(mu_);
    failing_ = f;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
  bool deposed_ = false;
  bool failing_ = false;
};

class DoingDispatcher : public ActionDispatcher {
 public:
  DispatchResult StartJob(const Job& job, const Node& node) override {
    started.push_back(job.spec.id + "@" + node.spec.id);
    return {true, "started"};
  }
  DispatchResult Carry(const Decision& d) override {
    carried.push_back(d);
    if (on_carry) on_carry(d);
    if (refuse_carries > 0) {
      --refuse_carries;
      return {false, "not carried out: cairnd does not answer (fake)", true, refuse_final};
    }
    return {true, "done by fake daemon"};
  }
  DispatchResult StopJob(const Job& job, const Node& node) override {
    stopped.push_back(job.spec.id + "@" + node.spec.id);
    if (refuse_stop) return {false, "node unreachable", true};
    return {true, "stopped"};
  }
  std::string Describe() const override { return "fake"; }
  void KnowJob(const Job& job) override { known.push_back(job.spec.id); }
  std::vector<std::string> known;
  std::vector<std::string> started;
  std::vector<Decision> carried;
  std::vector<std::string> stopped;
  bool refuse_stop = false;
  int refuse_carries = 0;     // the next this many decisions are not carried out
  bool refuse_final = false;  // ... for a reason a later try cannot change
  std::function<void(const Decision&)> on_carry;  // called as a decision is carried out
  // The decisions carried out for `job`.
  std::vector<Decision> CarriedFor(const std::string& job) const {
    std::vector<Decision> out;
    for (const Decision& d : carried) {
      if (d.job_id == job) out.push_back(d);
    }
    return out;
  }
};

// Also answers where jobs run, from a table "job@node" -> what that node's daemon says.
class LocatingDispatcher : public DoingDispatcher {
 public:
  JobWhere Locate(const std::string& job, const std::string& node) override {
    auto it = where.find(job + "@" + node);
    return it == where.end() ? JobWhere{JobWhere::kAbsent, "no such job", 0} : it->second;
  }
  absl::StatusOr<std::vector<std::pair<std::string, int>>> RunningJobs(const std::string& node) override {
    std::vector<std::pair<std::string, int>> out;
    for (const auto& [key, w] : where) {
      if (w.kind == JobWhere::kRunning && absl::EndsWith(key, "@" + node)) out.emplace_back(key.substr(0, key.find('@')), w.pid);
    }
    return out;
  }
  DispatchResult Kill(const std::string& job, const std::string& node) override {
    killed.push_back(job + "@" + node);
    where.erase(job + "@" + node);
    return {true, "stopped there"};
  }
  void SetTerm(uint64_t t) override { term = t; }
  std::map<std::string, JobWhere> where;
  std::vector<std::string> killed;
  uint64_t term = 0;
};

constexpr auto kRunning = ActionDispatcher::JobWhere::kRunning;
constexpr auto kBusy = ActionDispatcher::JobWhere::kBusy;

api::RegisterNodeRequest Node(const std::string& id, double price, bool spot) {
  api::RegisterNodeRequest r;
  api::NodeSpec* s = r.mutable_spec();
  s->set_id(id);
  s->set_cpus(8);
  s->set_memory_mb(64000);
  s->set_gpus(1);
  s->set_gpu_type("V100");
  s->set_price_per_hour(price);
  s->set_spot(spot);
  return r;
}

api::SubmitJobRequest Job1(const std::string& id) {
  api::SubmitJobRequest r;
  r.mutable_spec()->set_id(id);
  r.mutable_spec()->set_gpus(1);
  r.mutable_spec()->set_cpus(4);
  r.mutable_spec()->set_memory_mb(8000);
  return r;
}

class ControllerCoreTest : public ::testing::Test {
 protected:
  ControllerCoreTest() : controller_(&store_, &dispatcher_, Options()) { controller_.Tick(); }
  static ControllerOptions Options() {
    ControllerOptions o;
    o.id = "test";
    o.heartbeat_timeout_s = 0.2;
    o.retry_first_s = 0.01;
    o.retry_tries = 2;
    return o;
  }
  // Ticks `c` `n` times, 20 ms apart, each after a heartbeat from every node of `alive`.
  static void TickWhile(Controller& c, const std::vector<std::string>& alive, int n = 10) {
    for (int i = 0; i < n; ++i) {
      for (const std::string& node : alive) {
        api::HeartbeatRequest hb;
        hb.set_node_id(node);
        ASSERT_TRUE(c.Heartbeat(hb).ok());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      c.Tick();
    }
  }
  // Nodes spot ($0.9/h) and od ($3/h); service svc on spot; spot's reclaim notice: the
  // spot-notice rule decides to move svc to od.
  void NoticeMovesSvcToOd(Controller& c, api::ReportSignalResponse* out = nullptr) {
    api::RegisterNodeResponse rr;
    ASSERT_TRUE(c.RegisterNode(Node("spot", 0.9, true), &rr).ok());
    ASSERT_TRUE(c.RegisterNode(Node("od", 3.0, false), &rr).ok());
    api::SubmitJobRequest job = Job1("svc");
    job.mutable_spec()->set_service(true);
    job.mutable_spec()->mutable_checkpoint()->set_on_notice(true);
    job.mutable_spec()->mutable_checkpoint()->set_notice_checkpoint_s(20);
    api::SubmitJobResponse sr;
    ASSERT_TRUE(c.SubmitJob(job, &sr).ok());
    ASSERT_EQ(sr.node_id(), "spot");
    api::NodeSignal sig;
    sig.set_kind(api::NodeSignal::SPOT_NOTICE);
    sig.set_node_id("spot");
    sig.set_notice_s(120);
    api::ReportSignalResponse resp;
    ASSERT_TRUE(c.ReportSignal(sig, out != nullptr ? out : &resp).ok());
  }
  static std::string PendingOf(Controller& c, const std::string& job) {
    api::ClusterStatusResponse st;
    EXPECT_TRUE(c.ClusterStatus(&st).ok());
    for (const auto& j : st.jobs()) {
      if (j.spec().id() == job) return j.pending_action();
    }
    return "?";
  }
  static std::string NodeOf(Controller& c, const std::string& job) {
    api::ClusterStatusResponse st;
    EXPECT_TRUE(c.ClusterStatus(&st).ok());
    for (const auto& j : st.jobs()) {
      if (j.spec().id() == job) return j.node_id();
    }
    return "?";
  }
  // Nodes a (spot, $0.9/h) and b (on demand, $3/h); job j, placed on a, the cheaper.
  void PlaceJobOnA() {
    api::RegisterNodeResponse rr;
    ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, true), &rr).ok());
    ASSERT_TRUE(controller_.RegisterNode(Node("b", 3.0, false), &rr).ok());
    api::SubmitJobResponse sr;
    ASSERT_TRUE(controller_.SubmitJob(Job1("j"), &sr).ok());
    ASSERT_EQ(sr.node_id(), "a");
  }
  // `node` reports a checkpoint `id` of job j taken at `time` (Unix seconds).
  void ReportCheckpoint(const std::string& node, const std::string& id, double time) {
    api::NodeSignal ck;
    ck.set_kind(api::NodeSignal::CHECKPOINT);
    ck.set_node_id(node);
    ck.set_job_id("j");
    ck.set_checkpoint_id(id);
    ck.set_checkpoint_time(time);
    api::ReportSignalResponse resp;
    ASSERT_TRUE(controller_.ReportSignal(ck, &resp).ok());
  }
  // Only node b heartbeats; a goes silent past the heartbeat timeout, and `c` notices.
  static void OnlyBHeartbeatsUntilALost(Controller& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    api::HeartbeatRequest hb;
    hb.set_node_id("b");
    ASSERT_TRUE(c.Heartbeat(hb).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.Tick();
  }
  // The stored record of job j.
  api::StoredJob StoredJ() {
    api::StoredJob sj;
    auto stored = store_.Get("jobs/j");
    EXPECT_TRUE(stored.ok() && stored->has_value());
    if (stored.ok() && stored->has_value()) {
      EXPECT_TRUE(sj.ParseFromString(**stored));
    }
    return sj;
  }
  // Job j placed on a; a goes silent and the node-lost rule decides to restore j on b; the
  // controller "dies" while carrying it out (nothing it writes afterwards reaches the store).
  // The store then holds j on a with the restore in flight.
  void DieWhileRestoringOnB() {
    PlaceJobOnA();
    ASSERT_FALSE(HasFatalFailure());
    bool in_flight_first = false;
    dispatcher_.on_carry = [&](const Decision& d) {
      api::StoredJob sj = StoredJ();
      in_flight_first = sj.has_in_flight() && sj.in_flight().action() == "restore" &&
                        sj.in_flight().to_node() == "b" && sj.in_flight().from_node() == "a" && d.job_id == "j";
      store_.FailWrites(true);
    };
    OnlyBHeartbeatsUntilALost(controller_);
    ASSERT_EQ(dispatcher_.carried.size(), 1u);
    EXPECT_TRUE(in_flight_first) << "the decision is stored in flight before any node is asked";
    store_.FailWrites(false);
    api::StoredJob sj = StoredJ();
    ASSERT_TRUE(sj.has_in_flight());
    EXPECT_EQ(sj.node_id(), "a");
  }
  // The events of `c` of kind `kind`.
  static std::vector<api::Event> EventsOf(Controller& c, const std::string& kind) {
    api::ListEventsResponse ev;
    EXPECT_TRUE(c.ListEvents(api::ListEventsRequest(), &ev).ok());
    std::vector<api::Event> out;
    for (const api::Event& e : ev.events()) {
      if (e.kind() == kind) out.push_back(e);
    }
    return out;
  }
  static std::string JobNode(Controller& c) {
    api::ClusterStatusResponse st;
    EXPECT_TRUE(c.ClusterStatus(&st).ok());
    return st.jobs_size() == 1 ? st.jobs(0).node_id() : "?";
  }
  MemoryStore store_;
  DoingDispatcher dispatcher_;
  Controller controller_;
};

// With a dispatcher that carries actions out, a lost node's job is rebound to the target the
// node-lost rule chose, and nothing stays pending.
TEST_F(ControllerCoreTest, CarriedOutDecisionMovesTheJob) {
  PlaceJobOnA();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(dispatcher_.started, std::vector<std::string>{"j@a"});

  OnlyBHeartbeatsUntilALost(controller_);

  ASSERT_EQ(dispatcher_.carried.size(), 1u);
  EXPECT_EQ(dispatcher_.carried[0].action, Action::kRestore);
  EXPECT_EQ(dispatcher_.carried[0].target_node_id, "b");
  api::ClusterStatusResponse st;
  ASSERT_TRUE(controller_.ClusterStatus(&st).ok());
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).node_id(), "b");
  EXPECT_EQ(st.jobs(0).state(), "running");
  EXPECT_EQ(st.jobs(0).pending_action(), "");
  for (const auto& n : st.nodes()) EXPECT_EQ(n.health(), n.spec().id() == "a" ? "lost" : "healthy");

  // The move is in the store: a fresh controller on it sees the job on b.
  DoingDispatcher d2;
  Controller again(&store_, &d2, Options());
  again.Tick();
  api::ClusterStatusResponse st2;
  ASSERT_TRUE(again.ClusterStatus(&st2).ok());
  EXPECT_EQ(st2.jobs(0).node_id(), "b");
}

// The checkpoints nodes report are kept in the store: a new leader restores a lost node's job
// from the newest one, not from the beginning; only the job's own node's reports count.
TEST_F(ControllerCoreTest, ReportedCheckpointsSurviveALeaderChange) {
  PlaceJobOnA();
  ASSERT_FALSE(HasFatalFailure());
  double t = 0;
  for (int i = 0; i < 40; ++i) {  // more than the controller keeps: only the newest stay
    t = absl::ToUnixMicros(absl::Now()) / 1e6 - 40 + i;
    ReportCheckpoint("a", "j-" + std::to_string(i), t);
    ASSERT_FALSE(HasFatalFailure());
  }
  // A node the job is not placed on (one cut off by a partition, say) does not speak for it.
  ReportCheckpoint("b", "j-from-b", t + 5);
  ASSERT_FALSE(HasFatalFailure());

  DoingDispatcher d2;
  Controller again(&store_, &d2, Options());
  again.Tick();
  EXPECT_EQ(d2.known, std::vector<std::string>{"j"}) << "the new leader tells its dispatcher the jobs it loaded";
  OnlyBHeartbeatsUntilALost(again);
  ASSERT_EQ(d2.carried.size(), 1u);
  EXPECT_EQ(d2.carried[0].action, Action::kRestore);
  EXPECT_EQ(d2.carried[0].target_node_id, "b");
  EXPECT_DOUBLE_EQ(d2.carried[0].restore_from_time, t) << "restored from the newest reported checkpoint";
  auto stored = store_.Get("jobs/j");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  api::StoredJob sj;
  ASSERT_TRUE(sj.ParseFromString(**stored));
  EXPECT_EQ(sj.checkpoints_size(), 32);
  EXPECT_DOUBLE_EQ(sj.checkpoints(sj.checkpoints_size() - 1).time(), t);
}

// A spot notice reported by a node runs the spot-notice rule; its decisions come back as events.
TEST_F(ControllerCoreTest, SpotNoticeSignalRunsTheRule) {
  api::ReportSignalResponse resp;
  ASSERT_NO_FATAL_FAILURE(NoticeMovesSvcToOd(controller_, &resp));
  ASSERT_GE(resp.events_size(), 2);
  EXPECT_EQ(resp.events(0).kind(), "signal");
  bool decided = false;
  for (const auto& e : resp.events()) {
    if (e.kind() == "decision" && e.rule() == "spot-notice") decided = true;
  }
  EXPECT_TRUE(decided) << resp.DebugString();
  // Unknown nodes are refused by name.
  api::NodeSignal sig;
  sig.set_kind(api::NodeSignal::SPOT_NOTICE);
  sig.set_notice_s(120);
  sig.set_node_id("ghost");
  absl::Status s = controller_.ReportSignal(sig, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "ghost"));
}

// Scale-down suspends the lowest-priority GPU job first; carried out, it releases the node.
TEST_F(ControllerCoreTest, ScaleDownSuspendsLowestPriority) {
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, true), &rr).ok());
  ASSERT_TRUE(controller_.RegisterNode(Node("b", 3.0, false), &rr).ok());
  api::SubmitJobResponse sr;
  api::SubmitJobRequest low = Job1("low"), high = Job1("high");
  low.mutable_spec()->set_priority(1);
  high.mutable_spec()->set_priority(9);
  ASSERT_TRUE(controller_.SubmitJob(high, &sr).ok());
  ASSERT_TRUE(controller_.SubmitJob(low, &sr).ok());
  api::ScaleDownRequest req;
  req.set_gpus(1);
  api::ScaleDownResponse resp;
  ASSERT_TRUE(controller_.ScaleDown(req, &resp).ok());
  ASSERT_EQ(dispatcher_.carried.size(), 1u);
  EXPECT_EQ(dispatcher_.carried[0].action, Action::kSuspend);
  EXPECT_EQ(dispatcher_.carried[0].job_id, "low");
  api::ClusterStatusResponse st;
  ASSERT_TRUE(controller_.ClusterStatus(&st).ok());
  for (const auto& j : st.jobs()) {
    EXPECT_EQ(j.state(), j.spec().id() == "low" ? "suspended" : "running");
  }
  req.set_gpus(0);
  EXPECT_EQ(controller_.ScaleDown(req, &resp).code(), absl::StatusCode::kInvalidArgument);
}

// A submit whose store write fails leaves no job behind, so the same submit can be retried; a
// repeated identical submit answers with the job as it is; a different one under the id is refused.
TEST_F(ControllerCoreTest, SubmitIsAllOrNothingAndRetrySafe) {
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, true), &rr).ok());
  api::SubmitJobRequest job = Job1("j");
  job.mutable_spec()->add_command("python3");
  job.mutable_spec()->add_command("train.py");
  store_.FailWrites(true);
  api::SubmitJobResponse sr;
  EXPECT_EQ(controller_.SubmitJob(job, &sr).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(dispatcher_.started.empty());  // nothing asked of the node before the store had it
  store_.FailWrites(false);
  api::ClusterStatusResponse st;
  ASSERT_TRUE(controller_.ClusterStatus(&st).ok());
  EXPECT_EQ(st.jobs_size(), 0);
  EXPECT_EQ(st.nodes(0).free_gpus(), 1);

  ASSERT_TRUE(controller_.SubmitJob(job, &sr).ok());
  EXPECT_EQ(sr.node_id(), "a");
  api::SubmitJobResponse again;
  ASSERT_TRUE(controller_.SubmitJob(job, &again).ok());
  EXPECT_EQ(again.node_id(), "a");
  EXPECT_EQ(dispatcher_.started.size(), 1u);  // not started twice
  api::SubmitJobRequest other = job;
  other.mutable_spec()->set_cpus(2);
  EXPECT_EQ(controller_.SubmitJob(other, &again).code(), absl::StatusCode::kAlreadyExists);

  // The command is kept for the node daemon, also across a reload from the store.
  DoingDispatcher d2;
  Controller reloaded(&store_, &d2, Options());
  reloaded.Tick();
  ASSERT_TRUE(reloaded.ClusterStatus(&st).ok());
  ASSERT_EQ(st.jobs_size(), 1);
  ASSERT_EQ(st.jobs(0).spec().command_size(), 2);
  EXPECT_EQ(st.jobs(0).spec().command(1), "train.py");
}

// A controller whose store write is refused because another controller now leads steps down at
// once and refuses further work with Unavailable.
TEST_F(ControllerCoreTest, DeposedLeaderStepsDown) {
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, true), &rr).ok());
  store_.Depose();
  api::SubmitJobResponse sr;
  absl::Status s = controller_.SubmitJob(Job1("late"), &sr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_FALSE(controller_.Leader().leader());
  api::ClusterStatusResponse st;
  EXPECT_EQ(controller_.ClusterStatus(&st).code(), absl::StatusCode::kUnavailable);
  controller_.Tick();
  EXPECT_EQ(controller_.Leader().leader_id(), "someone-else");
}

// Cancel stops the job on its node, forgets it and gives its place to a waiting job; a node that
// cannot stop it keeps it known; unknown jobs are refused by name.
TEST_F(ControllerCoreTest, CancelStopsTheJobAndFreesItsPlace) {
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, true), &rr).ok());
  api::SubmitJobResponse sr;
  ASSERT_TRUE(controller_.SubmitJob(Job1("first"), &sr).ok());
  ASSERT_EQ(sr.node_id(), "a");
  ASSERT_TRUE(controller_.SubmitJob(Job1("second"), &sr).ok());
  ASSERT_EQ(sr.node_id(), "");  // the one GPU is taken

  api::CancelJobRequest req;
  req.set_job_id("first");
  api::CancelJobResponse resp;
  dispatcher_.refuse_stop = true;
  absl::Status s = controller_.CancelJob(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "node unreachable")) << s;
  api::ClusterStatusResponse st;
  ASSERT_TRUE(controller_.ClusterStatus(&st).ok());
  EXPECT_EQ(st.jobs_size(), 2);

  dispatcher_.refuse_stop = false;
  st.Clear();
  ASSERT_TRUE(controller_.CancelJob(req, &resp).ok());
  ASSERT_EQ(resp.events_size(), 1);
  EXPECT_EQ(resp.events(0).kind(), "job-cancelled");
  EXPECT_EQ(dispatcher_.stopped, (std::vector<std::string>{"first@a", "first@a"}));
  ASSERT_TRUE(controller_.ClusterStatus(&st).ok());
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).spec().id(), "second");
  EXPECT_EQ(st.jobs(0).node_id(), "a");  // placed in the freed GPU
  EXPECT_EQ(dispatcher_.started, (std::vector<std::string>{"first@a", "second@a"}));

  // Gone from the store too.
  DoingDispatcher d2;
  Controller reloaded(&store_, &d2, Options());
  reloaded.Tick();
  api::ClusterStatusResponse after;
  ASSERT_TRUE(reloaded.ClusterStatus(&after).ok());
  EXPECT_EQ(after.jobs_size(), 1);

  req.set_job_id("ghost");
  s = controller_.CancelJob(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "ghost"));
}

// A node with jobs bound cannot be removed; without, it is removed from the model and the store.
TEST_F(ControllerCoreTest, RemoveNodeOnlyWithoutJobs) {
  PlaceJobOnA();
  ASSERT_FALSE(HasFatalFailure());
  api::RemoveNodeRequest req;
  req.set_node_id("a");
  api::RemoveNodeResponse resp;
  absl::Status s = controller_.RemoveNode(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "jobs j are bound")) << s;
  req.set_node_id("b");
  ASSERT_TRUE(controller_.RemoveNode(req, &resp).ok());
  ASSERT_EQ(resp.events_size(), 1);
  EXPECT_EQ(resp.events(0).kind(), "node-removed");
  DoingDispatcher d2;
  Controller reloaded(&store_, &d2, Options());
  reloaded.Tick();
  api::ClusterStatusResponse st;
  ASSERT_TRUE(reloaded.ClusterStatus(&st).ok());
  ASSERT_EQ(st.nodes_size(), 1);
  EXPECT_EQ(st.nodes(0).spec().id(), "a");
  api::HeartbeatRequest hb;
  hb.set_node_id("b");
  EXPECT_EQ(controller_.Heartbeat(hb).code(), absl::StatusCode::kNotFound);
}

// The deadline guard runs on the controller's own clock: a suspended batch job whose slack has
// shrunk to the reserve is resumed without any other event, once, not at every round.
TEST_F(ControllerCoreTest, DeadlineGuardResumesAWaitingJobOnItsOwn) {
  ControllerOptions o = Options();
  o.deadline_check_s = 0.01;
  o.heartbeat_timeout_s = 60;
  DoingDispatcher dispatcher;
  Controller c(&store_, &dispatcher, o);
  c.Tick();
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(c.RegisterNode(Node("od", 3.0, false), &rr).ok());
  api::SubmitJobRequest job = Job1("late");
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  job.mutable_spec()->set_deadline(now + 2 * 3600);
  job.mutable_spec()->set_work_s(1.9 * 3600);
  api::SubmitJobResponse sr;
  ASSERT_TRUE(c.SubmitJob(job, &sr).ok());
  ASSERT_EQ(sr.node_id(), "od");
  api::ScaleDownRequest down;
  down.set_gpus(1);
  api::ScaleDownResponse dr;
  ASSERT_TRUE(c.ScaleDown(down, &dr).ok());
  ASSERT_EQ(dispatcher.carried.size(), 1u);
  ASSERT_EQ(dispatcher.carried[0].action, Action::kSuspend);

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.Tick();
  ASSERT_EQ(dispatcher.carried.size(), 2u);
  EXPECT_EQ(dispatcher.carried[1].action, Action::kResume);
  EXPECT_EQ(dispatcher.carried[1].rule, "deadline-guard");
  EXPECT_EQ(dispatcher.carried[1].target_node_id, "od");
  api::ClusterStatusResponse st;
  ASSERT_TRUE(c.ClusterStatus(&st).ok());
  EXPECT_EQ(st.jobs(0).state(), "running");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.Tick();
  EXPECT_EQ(dispatcher.carried.size(), 2u);  // running again: nothing more to decide
}

// The event log keeps only the newest events; sequence numbers go on increasing.
TEST_F(ControllerCoreTest, EventLogIsBounded) {
  ControllerOptions o = Options();
  o.keep_events = 5;
  DoingDispatcher dispatcher;
  Controller c(&store_, &dispatcher, o);
  c.Tick();
  api::RegisterNodeResponse rr;
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(c.RegisterNode(Node("n" + std::to_string(i), 1.0 + i, true), &rr).ok());
  auto stored = store_.List("events/");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 5u);
  api::ListEventsResponse ev;
  ASSERT_TRUE(c.ListEvents(api::ListEventsRequest(), &ev).ok());
  ASSERT_EQ(ev.events_size(), 5);
  EXPECT_EQ(ev.events(4).kind(), "node-registered");
  EXPECT_EQ(ev.events(4).node_id(), "n11");
  for (int i = 1; i < 5; ++i) EXPECT_EQ(ev.events(i).seq(), ev.events(i - 1).seq() + 1);
}

// A decision stored in flight by a controller that died carrying it out, found running on its
// target by the next leader: carried out; the job is placed there and nothing is done again.
TEST_F(ControllerCoreTest, InFlightDecisionFoundCarriedOutIsApplied) {
  DieWhileRestoringOnB();
  ASSERT_FALSE(HasFatalFailure());
  LocatingDispatcher d2;
  d2.where["j@b"] = {kRunning, "running", 42};
  Controller next(&store_, &d2, Options());
  next.Tick();
  EXPECT_EQ(JobNode(next), "b");
  std::vector<api::Event> resolved = EventsOf(next, "decision-resolved");
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_TRUE(absl::StrContains(resolved[0].reason(), "carried out: b says running (pid 42)")) << resolved[0].reason();
  EXPECT_TRUE(d2.carried.empty()) << "not carried out twice";
  EXPECT_FALSE(StoredJ().has_in_flight());
  EXPECT_EQ(StoredJ().node_id(), "b");
}

// Still running where it was: not carried out; abandoned with its reason, nothing stays pending.
TEST_F(ControllerCoreTest, InFlightDecisionNotCarriedOutIsAbandoned) {
  DieWhileRestoringOnB();
  ASSERT_FALSE(HasFatalFailure());
  LocatingDispatcher d2;
  d2.where["j@a"] = {kRunning, "running", 7};
  Controller next(&store_, &d2, Options());
  next.Tick();
  EXPECT_EQ(JobNode(next), "a");
  std::vector<api::Event> abandoned = EventsOf(next, "decision-abandoned");
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_TRUE(absl::StrContains(abandoned[0].reason(), "the job still runs on a")) << abandoned[0].reason();
  EXPECT_TRUE(d2.carried.empty());
  EXPECT_FALSE(StoredJ().has_in_flight());
}

// Busy (a migration the daemons are settling): asked again later; then on neither node: the
// new leader carries it out itself.
TEST_F(ControllerCoreTest, InFlightDecisionWaitsWhileBusyThenIsCarriedOutAgain) {
  DieWhileRestoringOnB();
  ASSERT_FALSE(HasFatalFailure());
  LocatingDispatcher d2;
  d2.where["j@a"] = {kBusy, "migrating", 7};
  Controller next(&store_, &d2, Options());
  next.Tick();
  next.Tick();
  EXPECT_TRUE(StoredJ().has_in_flight()) << "kept while a node says the job is busy";
  EXPECT_TRUE(EventsOf(next, "decision-resumed").empty());
  // The next round: a no longer has it, b does not either.
  d2.where.erase("j@a");
  next.Tick();
  ASSERT_EQ(d2.carried.size(), 1u);
  EXPECT_EQ(d2.carried[0].action, Action::kRestore);
  EXPECT_EQ(d2.carried[0].target_node_id, "b");
  EXPECT_EQ(EventsOf(next, "decision-resumed").size(), 1u);
  EXPECT_EQ(JobNode(next), "b");
  EXPECT_FALSE(StoredJ().has_in_flight());
}

// Busy for long (a source that cannot find out how its migration ended holds the job frozen):
// not silent — one decision-waiting event, and the job's status shows its decision in flight.
TEST_F(ControllerCoreTest, InFlightDecisionBusyForLongIsSaidOnceAndShown) {
  DieWhileRestoringOnB();
  ASSERT_FALSE(HasFatalFailure());
  api::StoredJob sj = StoredJ();
  ASSERT_TRUE(sj.has_in_flight());
  sj.mutable_in_flight()->set_since(sj.in_flight().since() - 60);
  ASSERT_TRUE(store_.Put("jobs/j", sj.SerializeAsString()).ok());
  LocatingDispatcher d2;
  d2.where["j@a"] = {kBusy, "migrating", 7};
  Controller next(&store_, &d2, Options());
  next.Tick();
  next.Tick();
  next.Tick();
  std::vector<api::Event> waiting = EventsOf(next, "decision-waiting");
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_TRUE(absl::StrContains(waiting[0].reason(), "a says the job is busy")) << waiting[0].reason();
  api::ClusterStatusResponse st;
  ASSERT_TRUE(next.ClusterStatus(&st).ok());
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).pending_action(), "in flight: restore to b (node-lost)") << st.jobs(0).DebugString();
  EXPECT_TRUE(d2.carried.empty());
}

// A decision a node did not carry out is not left waiting for the rule's next trigger (which
// may never come): a lost node's job is decided again, after a backoff, until it runs.
TEST_F(ControllerCoreTest, ALostNodesJobIsDecidedAgainUntilItRuns) {
  PlaceJobOnA();
  ASSERT_FALSE(HasFatalFailure());
  dispatcher_.refuse_carries = 2;
  OnlyBHeartbeatsUntilALost(controller_);
  ASSERT_EQ(dispatcher_.carried.size(), 1u);
  EXPECT_EQ(JobNode(controller_), "a");
  EXPECT_EQ(PendingOf(controller_, "j"), "restore to b (node-lost)");
  std::vector<api::Event> decided = EventsOf(controller_, "decision");
  ASSERT_EQ(decided.size(), 1u);
  EXPECT_TRUE(absl::StrContains(decided[0].dispatch(), "decided again in 0.0 s (try 1; a is lost")) << decided[0].dispatch();

  TickWhile(controller_, {"b"});
  ASSERT_EQ(dispatcher_.carried.size(), 3u) << "refused twice, then carried out";
  for (const Decision& d : dispatcher_.carried) {
    EXPECT_EQ(d.action, Action::kRestore);
    EXPECT_EQ(d.target_node_id, "b");
  }
  EXPECT_EQ(JobNode(controller_), "b");
  EXPECT_EQ(PendingOf(controller_, "j"), "");
  EXPECT_EQ(StoredJ().pending_action(), "");
  EXPECT_TRUE(EventsOf(controller_, "decision-dropped").empty());
}

// A job that ran on an x86-64-v4 node may use its AVX-512 (its processes chose their code by the
// CPU they started on): when that node is lost, the job is restored only where the CPU has it —
// not on the cheaper node without — and what it may use is in the store, for the next leader.
TEST_F(ControllerCoreTest, ALostNodesJobGoesOnlyWhereTheCpuHasWhatItMayUse) {
  auto with_cpu = [](const std::string& id, double price, int level) {
    api::RegisterNodeRequest r = Node(id, price, false);
    r.mutable_spec()->set_cpu_level(level);
    for (const std::string& f : LevelFeatures(level)) r.mutable_spec()->add_cpu_features(f);
    return r;
  };
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(with_cpu("a", 0.9, 4), &rr).ok());
  api::SubmitJobResponse sr;
  ASSERT_TRUE(controller_.SubmitJob(Job1("j"), &sr).ok());
  ASSERT_EQ(sr.node_id(), "a");
  ASSERT_TRUE(controller_.RegisterNode(with_cpu("b", 1.0, 3), &rr).ok());
  ASSERT_TRUE(controller_.RegisterNode(with_cpu("c", 3.0, 4), &rr).ok());
  api::StoredJob sj = StoredJ();
  EXPECT_EQ(std::set<std::string>(sj.cpu_features().begin(), sj.cpu_features().end()), LevelFeatures(4));

  DoingDispatcher d2;
  Controller again(&store_, &d2, Options());
  again.Tick();
  TickWhile(again, {"b", "c"}, 15);  // a stays silent past the heartbeat timeout
  ASSERT_GE(d2.carried.size(), 1u);
  EXPECT_EQ(d2.carried[0].action, Action::kRestore);
  EXPECT_EQ(d2.carried[0].target_node_id, "c") << "b is cheaper, but its CPU lacks AVX-512";
}

// A move the source or the target did not answer is tried again once they do.
TEST_F(ControllerCoreTest, AMoveNotCarriedOutIsTriedAgain) {
  dispatcher_.refuse_carries = 1;
  NoticeMovesSvcToOd(controller_);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(dispatcher_.CarriedFor("svc").size(), 1u);
  EXPECT_EQ(dispatcher_.CarriedFor("svc")[0].action, Action::kMigrate);
  EXPECT_EQ(PendingOf(controller_, "svc"), "migrate to od (spot-notice)");
  EXPECT_EQ(NodeOf(controller_, "svc"), "spot");

  TickWhile(controller_, {"spot", "od"});
  ASSERT_EQ(dispatcher_.CarriedFor("svc").size(), 2u);
  EXPECT_EQ(dispatcher_.CarriedFor("svc")[1].target_node_id, "od");
  EXPECT_EQ(NodeOf(controller_, "svc"), "od");
  EXPECT_EQ(PendingOf(controller_, "svc"), "");
}

// Tried retry_tries times more, then dropped, saying so: the job runs on where it is.
TEST_F(ControllerCoreTest, AMoveRefusedEveryTimeIsDroppedAfterItsTries) {
  dispatcher_.refuse_carries = 100;
  NoticeMovesSvcToOd(controller_);
  ASSERT_FALSE(HasFatalFailure());
  TickWhile(controller_, {"spot", "od"}, 20);
  EXPECT_EQ(dispatcher_.CarriedFor("svc").size(), 3u) << "once, then retry_tries (2) times";
  std::vector<api::Event> dropped = EventsOf(controller_, "decision-dropped");
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].job_id(), "svc");
  EXPECT_TRUE(absl::StrContains(dropped[0].reason(), "migrate to od (spot-notice), not carried out: tried 3 times"))
      << dropped[0].reason();
  EXPECT_EQ(PendingOf(controller_, "svc"), "");
  EXPECT_EQ(NodeOf(controller_, "svc"), "spot");
}

// A refusal a later try cannot change is not tried again; a decision whose target went away
// meanwhile is dropped, not carried out.
TEST_F(ControllerCoreTest, AFinalRefusalOrAStaleDecisionIsNotTriedAgain) {
  dispatcher_.refuse_carries = 1;
  dispatcher_.refuse_final = true;
  NoticeMovesSvcToOd(controller_);
  ASSERT_FALSE(HasFatalFailure());
  TickWhile(controller_, {"spot", "od"});
  EXPECT_EQ(dispatcher_.CarriedFor("svc").size(), 1u);
  EXPECT_EQ(PendingOf(controller_, "svc"), "migrate to od (spot-notice)") << "shown, not tried again";
  EXPECT_TRUE(EventsOf(controller_, "decision-dropped").empty());
}

TEST_F(ControllerCoreTest, AMoveWhoseTargetIsGoneIsDropped) {
  dispatcher_.refuse_carries = 1;
  NoticeMovesSvcToOd(controller_);
  ASSERT_FALSE(HasFatalFailure());
  api::RemoveNodeRequest rm;
  rm.set_node_id("od");
  api::RemoveNodeResponse rr;
  ASSERT_TRUE(controller_.RemoveNode(rm, &rr).ok());
  TickWhile(controller_, {"spot"}, 3);
  EXPECT_EQ(dispatcher_.CarriedFor("svc").size(), 1u);
  std::vector<api::Event> dropped = EventsOf(controller_, "decision-dropped");
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_TRUE(absl::StrContains(dropped[0].reason(), "not carried out: od is gone")) << dropped[0].reason();
  EXPECT_EQ(NodeOf(controller_, "svc"), "spot");
}

// A lost node that comes back still running the job: its restore elsewhere is dropped.
TEST_F(ControllerCoreTest, ARestoreIsDroppedWhenTheJobsNodeAnswersAgainWithIt) {
  LocatingDispatcher d;
  d.refuse_carries = 100;
  Controller c(&store_, &d, Options());
  c.Tick();
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(c.RegisterNode(Node("a", 0.9, true), &rr).ok());
  ASSERT_TRUE(c.RegisterNode(Node("b", 3.0, false), &rr).ok());
  api::SubmitJobResponse sr;
  ASSERT_TRUE(c.SubmitJob(Job1("j"), &sr).ok());
  ASSERT_EQ(sr.node_id(), "a");
  OnlyBHeartbeatsUntilALost(c);
  ASSERT_EQ(d.carried.size(), 1u);
  d.where["j@a"] = {kRunning, "running", 11};
  TickWhile(c, {"a", "b"}, 3);
  std::vector<api::Event> dropped = EventsOf(c, "decision-dropped");
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_TRUE(absl::StrContains(dropped[0].reason(), "restore to b (node-lost), not carried out: it runs on a again"))
      << dropped[0].reason();
  EXPECT_EQ(d.carried.size(), 1u);
  EXPECT_EQ(JobNode(c), "a");
}

// A pending move an earlier leader left (this one does not know its decision): dropped at
// once, saying so; the job runs where it is.
TEST_F(ControllerCoreTest, APendingMoveOfAnEarlierLeaderIsDropped) {
  dispatcher_.refuse_carries = 1;
  dispatcher_.refuse_final = true;  // left pending by the first leader
  NoticeMovesSvcToOd(controller_);
  ASSERT_FALSE(HasFatalFailure());
  LocatingDispatcher d2;
  Controller next(&store_, &d2, Options());
  next.Tick();
  std::vector<api::Event> dropped = EventsOf(next, "decision-dropped");
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_TRUE(absl::StrContains(dropped[0].reason(), "decided by an earlier leader, which did not carry it out"))
      << dropped[0].reason();
  EXPECT_EQ(PendingOf(next, "svc"), "");
  EXPECT_TRUE(d2.carried.empty());
}

// Each leadership has a term one more than the last: its dispatcher sends it with every call
// and registrations and heartbeats carry it to the daemons.
TEST_F(ControllerCoreTest, EachLeaderHasANewTerm) {
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, true), &rr).ok());
  const uint64_t first = rr.controller_term();
  EXPECT_GE(first, 1u);
  LocatingDispatcher d2;
  Controller next(&store_, &d2, Options());
  next.Tick();
  EXPECT_EQ(d2.term, first + 1);
  ASSERT_TRUE(next.RegisterNode(Node("a", 0.9, true), &rr).ok());
  EXPECT_EQ(rr.controller_term(), first + 1);
  api::HeartbeatRequest hb;
  hb.set_node_id("a");
  api::HeartbeatResponse hr;
  ASSERT_TRUE(next.Heartbeat(hb, &hr).ok());
  EXPECT_EQ(hr.controller_term(), first + 1);
}

// A node that registers reports its running jobs. A job the controller placed on a node that
// no longer runs it is followed to where it runs; one its placed node still runs is stopped on
// the other (one copy too many).
TEST_F(ControllerCoreTest, RegisteringNodeIsReconciledWithThePlacedNode) {
  PlaceJobOnA();
  ASSERT_FALSE(HasFatalFailure());
  {
    LocatingDispatcher d2;
    d2.where["j@a"] = {kRunning, "running", 5};
    d2.where["j@b"] = {kRunning, "running", 6};
    Controller next(&store_, &d2, Options());
    next.Tick();
    api::RegisterNodeResponse rr;
    ASSERT_TRUE(next.RegisterNode(Node("b", 3.0, false), &rr).ok());
    EXPECT_EQ(d2.killed, std::vector<std::string>{"j@b"});
    EXPECT_EQ(JobNode(next), "a");
    ASSERT_EQ(EventsOf(next, "fenced").size(), 1u);
  }
  {
    // The placed node is busy with the job (a migration in doubt, perhaps to b itself): b's copy
    // is left alone and looked at again each tick, until a settles.
    LocatingDispatcher d2;
    d2.where["j@a"] = {kBusy, "migrating", 5};
    d2.where["j@b"] = {kRunning, "running", 6};
    Controller next(&store_, &d2, Options());
    next.Tick();
    api::RegisterNodeResponse rr;
    ASSERT_TRUE(next.RegisterNode(Node("b", 3.0, false), &rr).ok());
    next.Tick();
    EXPECT_TRUE(d2.killed.empty()) << "the copy on b may be the one a migration committed";
    EXPECT_EQ(EventsOf(next, "fence-deferred").size(), 1u);
    d2.where["j@a"] = {ActionDispatcher::JobWhere::kGone, "migrated", 5};
    next.Tick();
    EXPECT_TRUE(d2.killed.empty());
    EXPECT_EQ(JobNode(next), "b");
    // And a leader can load what was stored (a followed job is bound whatever the node's room).
    LocatingDispatcher d4;
    Controller after(&store_, &d4, Options());
    after.Tick();
    EXPECT_EQ(JobNode(after), "b");
  }
  LocatingDispatcher d3;
  d3.where["j@a"] = {ActionDispatcher::JobWhere::kGone, "migrated", 5};
  d3.where["j@b"] = {kRunning, "running", 6};
  Controller next(&store_, &d3, Options());
  next.Tick();
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(next.RegisterNode(Node("b", 3.0, false), &rr).ok());
  EXPECT_TRUE(d3.killed.empty());
  EXPECT_EQ(JobNode(next), "b");
  std::vector<api::Event> found = EventsOf(next, "job-found");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(absl::StrContains(found[0].reason(), "a, where it was placed, says migrated")) << found[0].reason();
}

// A move cut between the checkpoint that stopped the job at its source and the restore on the
// target (the job runs on neither): the next leader restores it where it ran, from its newest
// stored checkpoint (the target may hold an old record of the job and refuse it).
TEST_F(ControllerCoreTest, MoveCutAfterItsStopIsRestoredWhereTheJobRan) {
  PlaceJobOnA();
  ASSERT_FALSE(HasFatalFailure());
  // What a leader that died in that cut left in the store.
  api::StoredJob sj = StoredJ();
  api::InFlight* f = sj.mutable_in_flight();
  f->set_action("migrate");
  f->set_rule("cheaper-capacity");
  f->set_from_node("a");
  f->set_to_node("b");
  f->set_term(1);
  f->set_since(absl::ToUnixMicros(absl::Now()) / 1e6);
  ASSERT_TRUE(store_.Put("jobs/j", sj.SerializeAsString()).ok());
  LocatingDispatcher d2;
  d2.where["j@a"] = {ActionDispatcher::JobWhere::kGone, "killed", 5};
  d2.where["j@b"] = {ActionDispatcher::JobWhere::kGone, "migrated", 6};
  Controller next(&store_, &d2, Options());
  next.Tick();
  ASSERT_EQ(d2.carried.size(), 1u);
  EXPECT_EQ(d2.carried[0].action, Action::kRestore);
  EXPECT_EQ(d2.carried[0].target_node_id, "a");
  EXPECT_GT(d2.carried[0].restore_from_time, 0);
  EXPECT_EQ(EventsOf(next, "decision-resumed").size(), 1u);
  EXPECT_FALSE(StoredJ().has_in_flight());
}


// ---- a rank that dies (NodeSignal JOB_ENDED)

// Restores ranks as asked (recorded), and answers where jobs run like LocatingDispatcher.
class GroupDispatcher : public LocatingDispatcher {
 public:
  absl::Status RestoreRank(const RankPart& part, const std::string& node) override {
    restored.push_back(part.ref.job_id + "@" + node + " from " + part.checkpoint);
    return absl::OkStatus();
  }
  absl::Status ReleaseRankNetwork(const std::string& job, const std::string& node) override {
    released.push_back(job + "@" + node);
    return absl::OkStatus();
  }
  std::vector<std::string> restored, released;
};

// Group g: ranks g-0 and g-1 (jobs of one CPU on nodes a and b), each reported running, and a
// group checkpoint g-ck of both in the store.
class RankDeathTest : public ::testing::Test {
 protected:
  RankDeathTest() : controller_(&store_, &dispatcher_, Options()) { controller_.Tick(); }
  static ControllerOptions Options() {
    ControllerOptions o;
    o.id = "test";
    return o;
  }
  void SetUp() override {
    api::RegisterNodeResponse rr;
    ASSERT_TRUE(controller_.RegisterNode(Node("a", 0.9, false), &rr).ok());
    ASSERT_TRUE(controller_.RegisterNode(Node("b", 0.9, false), &rr).ok());
    api::GroupCheckpoint g;
    g.set_id("g-ck");
    g.set_group("g");
    g.set_created(1000);
    for (int rank : {0, 1}) {
      api::SubmitJobRequest r;
      std::string id = absl::StrCat("g-", rank);
      r.mutable_spec()->set_id(id);
      r.mutable_spec()->set_cpus(6);  // one per node
      r.mutable_spec()->set_memory_mb(100);
      r.mutable_spec()->set_group("g");
      r.mutable_spec()->set_rank(rank);
      api::SubmitJobResponse sr;
      ASSERT_TRUE(controller_.SubmitJob(r, &sr).ok());
      node_[rank] = sr.node_id();
      dispatcher_.where[id + "@" + sr.node_id()] = {kRunning, "running", 100 + rank};
      api::RankCheckpoint* rc = g.add_ranks();
      rc->set_job_id(id);
      rc->set_rank(rank);
      rc->set_node_id(sr.node_id());
      rc->set_checkpoint(absl::StrCat(id, "-ck"));
    }
    ASSERT_NE(node_[0], node_[1]);
    ASSERT_TRUE(store_.Put("groups/g/g-ck", g.SerializeAsString()).ok());
  }
  // Rank `rank`'s job ended on its node at `when` (unix s): killed by `sig`, or exited `code`
  // (`known` false: the node could not see how). Its node's daemon says so too (unless `runs`).
  absl::Status Ended(int rank, double when, int sig, int code = 0, bool known = true, bool runs = false) {
    std::string id = absl::StrCat("g-", rank);
    dispatcher_.where[id + "@" + node_[rank]] =
        runs ? ActionDispatcher::JobWhere{kRunning, "running", 100 + rank}
             : ActionDispatcher::JobWhere{ActionDispatcher::JobWhere::kGone, "exited", 0};
    return Report(controller_, node_[rank], id, when, sig, code, known);
  }
  // Node `node` reports to `c` that job `job` ended at `when`.
  static absl::Status Report(Controller& c, const std::string& node, const std::string& job, double when, int sig,
                             int code = 0, bool known = true) {
    api::NodeSignal s;
    s.set_kind(api::NodeSignal::JOB_ENDED);
    s.set_node_id(node);
    s.set_job_id(job);
    s.set_exit_known(known);
    s.set_exit_signal(sig);
    s.set_exit_code(code);
    s.set_ended_time(when);
    api::ReportSignalResponse resp;
    return c.ReportSignal(s, &resp);
  }
  // How many events of kind `kind` the controller recorded.
  size_t Count(const std::string& kind) {
    api::ListEventsResponse ev;
    EXPECT_TRUE(controller_.ListEvents(api::ListEventsRequest(), &ev).ok());
    size_t n = 0;
    for (const api::Event& e : ev.events()) n += e.kind() == kind;
    return n;
  }
  static double Now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  MemoryStore store_;
  GroupDispatcher dispatcher_;
  Controller controller_;
  std::string node_[2];
};

// A rank killed by a signal: the survivor is stopped, every rank restored where it is from the
// newest group checkpoint, and the ranks' connections let go once all are back.
TEST_F(RankDeathTest, ARankKilledBringsTheGroupBackFromItsGroupCheckpoint) {
  ASSERT_TRUE(Ended(1, Now(), SIGKILL).ok());
  EXPECT_EQ(Count("job-ended"), 1u);
  EXPECT_EQ(Count("group-failover"), 1u);
  EXPECT_EQ(dispatcher_.killed, std::vector<std::string>{"g-0@" + node_[0]}) << "only the survivor is stopped";
  EXPECT_EQ(dispatcher_.restored, (std::vector<std::string>{"g-0@" + node_[0] + " from g-0-ck",
                                                             "g-1@" + node_[1] + " from g-1-ck"}));
  EXPECT_EQ(dispatcher_.released.size(), 2u);
  EXPECT_EQ(Count("group-restored"), 1u);
}

// The survivor's own end, from before the failover (it lost its peer), is not a second failover;
// an end after it is.
TEST_F(RankDeathTest, AnEndFromBeforeTheGroupsLastFailoverIsNotNews) {
  // Rank 1 died 0.5 s ago, rank 0 exited 1 (its peer gone) 0.3 s ago: reported in that order.
  ASSERT_TRUE(Ended(1, Now() - 0.5, SIGKILL).ok());
  ASSERT_EQ(Count("group-failover"), 1u);
  ASSERT_TRUE(Ended(0, Now() - 0.3, 0, 1).ok());
  EXPECT_EQ(Count("group-failover"), 1u);
  EXPECT_EQ(Count("job-ended"), 2u);
  ASSERT_TRUE(Ended(0, Now() + 1, SIGSEGV).ok());
  EXPECT_EQ(Count("group-failover"), 2u);
}

// A rank that exits 0 (its work done) is recorded, nothing more.
TEST_F(RankDeathTest, ARankThatFinishesIsOnlyRecorded) {
  ASSERT_TRUE(Ended(0, Now(), 0, 0).ok());
  EXPECT_EQ(Count("job-ended"), 1u);
  EXPECT_EQ(Count("group-failover"), 0u);
  EXPECT_TRUE(dispatcher_.restored.empty());
  EXPECT_TRUE(dispatcher_.killed.empty());
}

// While another rank's node does not answer, the failover waits for the node-lost rule: it would
// fail on that node.
TEST_F(RankDeathTest, AFailoverWaitsWhileAnotherRanksNodeDoesNotAnswer) {
  dispatcher_.where["g-1@" + node_[1]] = {ActionDispatcher::JobWhere::kUnreachable, "no answer", 0};
  ASSERT_TRUE(Ended(0, Now(), 0, 1).ok());
  EXPECT_EQ(Count("group-failover-deferred"), 1u);
  EXPECT_EQ(Count("group-failover"), 0u);
  EXPECT_TRUE(dispatcher_.restored.empty());
  EXPECT_TRUE(dispatcher_.killed.empty());
}

// Ranks that keep dying from the same group checkpoint are brought back three times, not more.
TEST_F(RankDeathTest, RanksThatKeepDyingAreBroughtBackThreeTimes) {
  for (int i = 0; i < 4; ++i) {
    dispatcher_.where["g-0@" + node_[0]] = {kRunning, "running", 100};
    ASSERT_TRUE(Ended(1, Now() + 1 + i, SIGKILL).ok());
  }
  EXPECT_EQ(Count("group-failover"), 3u);
  EXPECT_EQ(Count("group-failover-failed"), 1u);
  EXPECT_EQ(dispatcher_.restored.size(), 6u);
}

// An end whose status its node could not see is recorded, not taken for a death (a finished group
// is not rolled back); nor is the end of a rank its node runs again (an old incarnation's).
TEST_F(RankDeathTest, AnUnknownEndOrARankThatRunsAgainIsOnlyRecorded) {
  ASSERT_TRUE(Ended(1, Now(), 0, 0, /*known=*/false).ok());
  ASSERT_TRUE(Ended(0, Now(), SIGKILL, 0, true, /*runs=*/true).ok());
  EXPECT_EQ(Count("job-ended"), 2u);
  EXPECT_EQ(Count("group-failover"), 0u);
  EXPECT_TRUE(dispatcher_.restored.empty());
}

// After a failover moved a rank (node-lost), a later rank death restores it where it runs now.
TEST_F(RankDeathTest, ARankThatMovedSinceTheCheckpointIsRestoredWhereItRuns) {
  api::RegisterNodeResponse rr;
  ASSERT_TRUE(controller_.RegisterNode(Node("c", 0.9, false), &rr).ok());
  // Rank 1 now runs on c (as a failover would have left it): the model follows its daemon.
  std::string stored;
  {
    auto sj = store_.Get("jobs/g-1");
    ASSERT_TRUE(sj.ok() && sj->has_value());
    stored = **sj;
  }
  api::StoredJob j;
  ASSERT_TRUE(j.ParseFromString(stored));
  j.set_node_id("c");
  ASSERT_TRUE(store_.Put("jobs/g-1", j.SerializeAsString()).ok());
  Controller fresh(&store_, &dispatcher_, Options());
  fresh.Tick();  // loads the model from the store
  dispatcher_.where["g-1@c"] = {ActionDispatcher::JobWhere::kGone, "exited", 0};
  ASSERT_TRUE(Report(fresh, "c", "g-1", Now(), SIGKILL).ok());
  EXPECT_EQ(dispatcher_.restored, (std::vector<std::string>{"g-0@" + node_[0] + " from g-0-ck", "g-1@c from g-1-ck"}));
}

// A report from a node the job is not placed on (a stale copy stopped elsewhere) is ignored.
TEST_F(RankDeathTest, AnEndReportedByAnotherNodeIsIgnored) {
  ASSERT_TRUE(Report(controller_, node_[0], "g-1", Now(), SIGKILL).ok());
  EXPECT_EQ(Count("job-ended"), 0u);
  EXPECT_EQ(Count("group-failover"), 0u);
}

}  // namespace
}  // namespace cairn::controller
