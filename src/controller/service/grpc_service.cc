#include "controller/service/grpc_service.h"

#include "common/grpc_auth.h"

namespace cairn::controller {
namespace {

// UNAVAILABLE from the controller (not the leader, or its store unreachable) is worth retrying
// shortly; the trailing metadata tells clients apart from a controller that is not there at all.
grpc::Status Reply(grpc::ServerContext* ctx, const absl::Status& s) {
  if (s.code() == absl::StatusCode::kUnavailable) ctx->AddTrailingMetadata("cairn-retry", "1");
  return ToGrpc(s);
}

}  // namespace

grpc::Status GrpcService::Authorize(const grpc::ServerContext& ctx) const {
  return AuthorizeCaller(ctx, token_, "cairn-controller");
}

#define CAIRN_AUTHORIZE(ctx)                          \
  do {                                                \
    grpc::Status _auth = Authorize(*(ctx));           \
    if (!_auth.ok()) return _auth;                    \
  } while (0)

grpc::Status GrpcService::RegisterNode(grpc::ServerContext* ctx, const api::RegisterNodeRequest* req,
                                       api::RegisterNodeResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->RegisterNode(*req, resp));
}

grpc::Status GrpcService::Heartbeat(grpc::ServerContext* ctx, const api::HeartbeatRequest* req,
                                    api::HeartbeatResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->Heartbeat(*req, resp));
}

grpc::Status GrpcService::ReportSignal(grpc::ServerContext* ctx, const api::NodeSignal* req,
                                       api::ReportSignalResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->ReportSignal(*req, resp));
}

grpc::Status GrpcService::SubmitJob(grpc::ServerContext* ctx, const api::SubmitJobRequest* req,
                                    api::SubmitJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->SubmitJob(*req, resp));
}

grpc::Status GrpcService::ClusterStatus(grpc::ServerContext* ctx, const api::ClusterStatusRequest*,
                                        api::ClusterStatusResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->ClusterStatus(resp));
}

grpc::Status GrpcService::ExplainJob(grpc::ServerContext* ctx, const api::ExplainJobRequest* req,
                                     api::ExplainJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->ExplainJob(*req, resp));
}

grpc::Status GrpcService::ListEvents(grpc::ServerContext* ctx, const api::ListEventsRequest* req,
                                     api::ListEventsResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->ListEvents(*req, resp));
}

grpc::Status GrpcService::ScaleDown(grpc::ServerContext* ctx, const api::ScaleDownRequest* req,
                                    api::ScaleDownResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->ScaleDown(*req, resp));
}

grpc::Status GrpcService::CancelJob(grpc::ServerContext* ctx, const api::CancelJobRequest* req,
                                    api::CancelJobResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->CancelJob(*req, resp));
}

grpc::Status GrpcService::RemoveNode(grpc::ServerContext* ctx, const api::RemoveNodeRequest* req,
                                     api::RemoveNodeResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->RemoveNode(*req, resp));
}

grpc::Status GrpcService::CheckpointGroup(grpc::ServerContext* ctx, const api::CheckpointGroupRequest* req,
                                          api::CheckpointGroupResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->CheckpointGroup(*req, resp));
}

grpc::Status GrpcService::RestoreGroup(grpc::ServerContext* ctx, const api::RestoreGroupRequest* req,
                                       api::RestoreGroupResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->RestoreGroup(*req, resp));
}

grpc::Status GrpcService::ListGroupCheckpoints(grpc::ServerContext* ctx, const api::ListGroupCheckpointsRequest* req,
                                               api::ListGroupCheckpointsResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->ListGroupCheckpoints(*req, resp));
}

grpc::Status GrpcService::Leader(grpc::ServerContext* ctx, const api::LeaderRequest*,
                                 api::LeaderResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  *resp = controller_->Leader();
  return grpc::Status::OK;
}

#undef CAIRN_AUTHORIZE

}  // namespace cairn::controller
