#include "daemon/service.h"

#include "absl/strings/numbers.h"
#include "common/grpc_auth.h"
#include "common/status.h"
#include "daemon/job_spec_check.h"

namespace cairn::daemon {

grpc::Status GrpcService::Authorize(const grpc::ServerContext& ctx) const {
  grpc::Status auth = AuthorizeCaller(ctx, token_, "cairnd");
  if (!auth.ok()) return auth;
  // A controller's call carries its term; one from a deposed leader is refused.
  auto it = ctx.client_metadata().find("cairn-controller-term");
  if (it == ctx.client_metadata().end()) return grpc::Status::OK;
  uint64_t term = 0;
  if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &term)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "cairn-controller-term: not a number");
  }
  return ToGrpc(daemon_->HearControllerTerm(term, "a call from the controller"));
}

#define CAIRN_AUTHORIZE(ctx)                \
  do {                                      \
    grpc::Status _auth = Authorize(*(ctx)); \
    if (!_auth.ok()) return _auth;          \
  } while (0)

grpc::Status GrpcService::NodeInfo(grpc::ServerContext* ctx, const api::NodeInfoRequest*, api::NodeInfoResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  *resp = daemon_->Info();
  return grpc::Status::OK;
}

grpc::Status GrpcService::RunJob(grpc::ServerContext* ctx, const api::RunJobRequest* req, api::RunJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  UniqueFd owner;  // opened first: an owner that exits from now on is seen
  if (req->has_owner()) {
    auto o = OwnerWatch::Open(req->owner().pid(), req->owner().start_time());
    if (!o.ok()) return ToGrpc(Annotate(o.status(), "run"));
    owner = std::move(*o);
  }
  auto j = daemon_->RunJob(req->spec());
  if (!j.ok()) return ToGrpc(j.status());
  daemon_->SetOwner(j->name(), std::move(owner), req->has_owner() ? &req->owner() : nullptr);  // none given: none
  *resp->mutable_job() = *j;
  return grpc::Status::OK;
}

grpc::Status GrpcService::ListJobs(grpc::ServerContext* ctx, const api::ListJobsRequest*, api::ListJobsResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  for (auto& j : daemon_->ListJobs()) *resp->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

grpc::Status GrpcService::GetJob(grpc::ServerContext* ctx, const api::GetJobRequest* req, api::GetJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->GetJob(req->name());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::JobLogs(grpc::ServerContext* ctx, const api::JobLogsRequest* req, api::JobLogsResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->Logs(req->name(), req->stderr(), req->tail_lines(), req->tail_bytes());
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_data(std::move(*r));
  return grpc::Status::OK;
}

grpc::Status GrpcService::AttachJob(grpc::ServerContext* ctx, const api::AttachJobRequest* req,
                                    grpc::ServerWriter<api::AttachJobOutput>* writer) {
  CAIRN_AUTHORIZE(ctx);
  bool ended = false;
  absl::Status st = daemon_->Attach(
      *req,
      [&](const api::AttachJobOutput& o) {
        ended = ended || !o.state().empty();
        return writer->Write(o);
      },
      [&] { return ctx->IsCancelled() || stopping_; });
  if (st.ok() && req->bound() && !ended && !stopping_) daemon_->EndBoundJob(req->name(), [&] { return stopping_.load(); });
  return ToGrpc(st);
}

grpc::Status GrpcService::KillJob(grpc::ServerContext* ctx, const api::KillJobRequest* req, api::KillJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = req->cancel() ? daemon_->CancelJob(req->name()) : daemon_->KillJob(req->name(), req->signal());
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_job() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::SettleMigration(grpc::ServerContext* ctx, const api::SettleMigrationRequest* req,
                                          api::SettleMigrationResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->SettleMigration(req->name(), req->here());
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_job() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::DeleteJob(grpc::ServerContext* ctx, const api::DeleteJobRequest* req, api::DeleteJobResponse*) {
  CAIRN_AUTHORIZE(ctx);
  return ToGrpc(daemon_->DeleteJob(req->name(), req->keep_stored(), req->purge_stored()));
}

grpc::Status GrpcService::CheckpointJob(grpc::ServerContext* ctx, const api::CheckpointJobRequest* req,
                                        api::CheckpointJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->Checkpoint(*req, "manual");
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_checkpoint() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::RestoreJob(grpc::ServerContext* ctx, const api::RestoreJobRequest* req,
                                     api::RestoreJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  if (absl::Status bad = CheckRestoreRequest(*req); !bad.ok()) return ToGrpc(Annotate(bad, "restore"));
  std::string from = req->from();
  if (req->newest_stored()) {
    if (!from.empty() || !req->checkpoint().empty()) {
      return ToGrpc(absl::InvalidArgumentError("restore: give newest_stored, a checkpoint id or --from, not several"));
    }
    auto newest = daemon_->NewestStored(req->name(), req->taken_before());
    if (!newest.ok()) return ToGrpc(newest.status());
    from = *newest;
  }
  UniqueFd owner;
  if (req->has_owner()) {
    auto o = OwnerWatch::Open(req->owner().pid(), req->owner().start_time());
    if (!o.ok()) return ToGrpc(Annotate(o.status(), "restore"));
    owner = std::move(*o);
  }
  auto r = daemon_->Restore(req->name(), req->checkpoint(), from, req->hold_network());
  if (!r.ok()) return ToGrpc(r.status());
  daemon_->SetOwner(r->job().name(), std::move(owner), req->has_owner() ? &req->owner() : nullptr);  // none: none any more
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::ListCheckpoints(grpc::ServerContext* ctx, const api::ListCheckpointsRequest* req,
                                          api::ListCheckpointsResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  for (auto& c : daemon_->ListCheckpoints(req->job())) *resp->add_checkpoints() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status GrpcService::GetCheckpoint(grpc::ServerContext* ctx, const api::GetCheckpointRequest* req,
                                        api::GetCheckpointResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->GetCheckpoint(req->id());
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_checkpoint() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::DeleteCheckpoint(grpc::ServerContext* ctx, const api::DeleteCheckpointRequest* req,
                                           api::DeleteCheckpointResponse*) {
  CAIRN_AUTHORIZE(ctx);
  return ToGrpc(daemon_->DeleteCheckpoint(req->id()));
}

grpc::Status GrpcService::PinCheckpoint(grpc::ServerContext* ctx, const api::PinCheckpointRequest* req,
                                        api::PinCheckpointResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->PinCheckpoint(req->id(), req->pinned());
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_checkpoint() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::MigrationProgress(grpc::ServerContext* ctx, const api::MigrationProgressRequest* req,
                                            api::MigrationProgressResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  *resp = daemon_->MigrationProgress(req->name());
  return grpc::Status::OK;
}

grpc::Status GrpcService::CollectGarbage(grpc::ServerContext* ctx, const api::CollectGarbageRequest* req,
                                         api::CollectGarbageResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->CollectGarbage(req->dry_run());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::Watch(grpc::ServerContext* ctx, const api::WatchRequest* req,
                                grpc::ServerWriter<api::Event>* writer) {
  CAIRN_AUTHORIZE(ctx);
  uint64_t after = req->has_after_seq() ? req->after_seq() : daemon_->LastEventSeq();
  while (!ctx->IsCancelled() && !stopping_) {
    for (const api::Event& e : daemon_->WaitEvents(req->job(), after, 500)) {
      after = e.seq();
      if (!writer->Write(e)) return grpc::Status::OK;
    }
  }
  return grpc::Status::OK;
}

grpc::Status GrpcService::MigrateJob(grpc::ServerContext* ctx, const api::MigrateJobRequest* req,
                                     api::MigrateJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  if (absl::Status bad = CheckMigrateRequest(*req); !bad.ok()) return ToGrpc(Annotate(bad, "migrate"));
  auto r = daemon_->Migrate(*req);
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::ReceiveJob(grpc::ServerContext* ctx,
                                     grpc::ServerReaderWriter<api::MigrationReply, api::MigrationMessage>* stream) {
  CAIRN_AUTHORIZE(ctx);
  absl::Status st = daemon_->ReceiveJob([&](api::MigrationMessage* m) { return !ctx->IsCancelled() && stream->Read(m); },
                                        [&](const api::MigrationReply& r) { return stream->Write(r); },
                                        [&] { return ctx->IsCancelled(); });
  return ToGrpc(st);
}

grpc::Status GrpcService::MigrationOutcome(grpc::ServerContext* ctx, const api::MigrationOutcomeRequest* req,
                                           api::MigrationOutcomeResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->MigrationOutcome(req->name(), req->migration());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::ReleaseNetwork(grpc::ServerContext* ctx, const api::ReleaseNetworkRequest* req,
                                         api::ReleaseNetworkResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  auto r = daemon_->ReleaseNetwork(req->name());
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_job() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GrpcService::CheckpointRank(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<api::RankCheckpointReply, api::RankCheckpointMessage>* stream) {
  CAIRN_AUTHORIZE(ctx);
  return ToGrpc(daemon_->CheckpointRank(
      [&](api::RankCheckpointMessage* m) { return !ctx->IsCancelled() && stream->Read(m); },
      [&](const api::RankCheckpointReply& r) { return stream->Write(r); }, [&] { ctx->TryCancel(); }));
}

}  // namespace cairn::daemon
