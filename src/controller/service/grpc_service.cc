#include "controller/service/grpc_service.h"

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace cairn::controller {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC status codes are the same numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Compares without an early exit, so the time taken says nothing about the token.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// UNAVAILABLE from the controller (not the leader, or its store unreachable) is worth retrying
// shortly; the trailing metadata tells clients apart from a controller that is not there at all.
grpc::Status Reply(grpc::ServerContext* ctx, const absl::Status& s) {
  if (s.code() == absl::StatusCode::kUnavailable) ctx->AddTrailingMetadata("cairn-retry", "1");
  return ToGrpc(s);
}

}  // namespace

grpc::Status GrpcService::Authorize(const grpc::ServerContext& ctx) const {
  if (absl::StartsWith(ctx.peer(), "unix:")) return grpc::Status::OK;
  if (token_.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this controller accepts TCP calls only with a token (--token-file)");
  }
  auto it = ctx.client_metadata().find("authorization");
  if (it != ctx.client_metadata().end()) {
    absl::string_view got(it->second.data(), it->second.size());
    if (absl::ConsumePrefix(&got, "Bearer ") && SameSecret(got, token_)) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong token: TCP calls need `authorization: Bearer TOKEN` "
                      "(cairn: --token-file FILE or CAIRN_TOKEN)");
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
                                    api::HeartbeatResponse*) {
  CAIRN_AUTHORIZE(ctx);
  return Reply(ctx, controller_->Heartbeat(*req));
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

grpc::Status GrpcService::Leader(grpc::ServerContext* ctx, const api::LeaderRequest*,
                                 api::LeaderResponse* resp) {
  CAIRN_AUTHORIZE(ctx);
  *resp = controller_->Leader();
  return grpc::Status::OK;
}

#undef CAIRN_AUTHORIZE

}  // namespace cairn::controller
