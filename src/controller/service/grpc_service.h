#pragma once
// The gRPC face of the controller: translates each call of proto/controller.proto into a
// Controller method, and enforces who may call. Calls arriving on the unix socket are trusted
// (the socket is 0600, root only); calls arriving over TCP must carry the metadata
// `authorization: Bearer TOKEN` with the controller's token, or fail with UNAUTHENTICATED.
//
// Thread safety: as the Controller's.

#include <string>

#include "controller.grpc.pb.h"
#include "controller/service/controller.h"

namespace cairn::controller {

class GrpcService final : public api::Controller::Service {
 public:
  // `tcp_token` empty: TCP calls are all refused (the controller listens on TCP only with one).
  GrpcService(Controller* controller, std::string tcp_token)
      : controller_(controller), token_(std::move(tcp_token)) {}

  grpc::Status RegisterNode(grpc::ServerContext* ctx, const api::RegisterNodeRequest* req,
                            api::RegisterNodeResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const api::HeartbeatRequest* req,
                         api::HeartbeatResponse* resp) override;
  grpc::Status ReportSignal(grpc::ServerContext* ctx, const api::NodeSignal* req,
                            api::ReportSignalResponse* resp) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const api::SubmitJobRequest* req,
                         api::SubmitJobResponse* resp) override;
  grpc::Status ClusterStatus(grpc::ServerContext* ctx, const api::ClusterStatusRequest* req,
                             api::ClusterStatusResponse* resp) override;
  grpc::Status ExplainJob(grpc::ServerContext* ctx, const api::ExplainJobRequest* req,
                          api::ExplainJobResponse* resp) override;
  grpc::Status ListEvents(grpc::ServerContext* ctx, const api::ListEventsRequest* req,
                          api::ListEventsResponse* resp) override;
  grpc::Status ScaleDown(grpc::ServerContext* ctx, const api::ScaleDownRequest* req,
                         api::ScaleDownResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const api::CancelJobRequest* req,
                         api::CancelJobResponse* resp) override;
  grpc::Status RemoveNode(grpc::ServerContext* ctx, const api::RemoveNodeRequest* req,
                          api::RemoveNodeResponse* resp) override;
  grpc::Status CheckpointGroup(grpc::ServerContext* ctx, const api::CheckpointGroupRequest* req,
                               api::CheckpointGroupResponse* resp) override;
  grpc::Status RestoreGroup(grpc::ServerContext* ctx, const api::RestoreGroupRequest* req,
                            api::RestoreGroupResponse* resp) override;
  grpc::Status ListGroupCheckpoints(grpc::ServerContext* ctx, const api::ListGroupCheckpointsRequest* req,
                                    api::ListGroupCheckpointsResponse* resp) override;
  grpc::Status Leader(grpc::ServerContext* ctx, const api::LeaderRequest* req,
                      api::LeaderResponse* resp) override;

 private:
  // OK for unix-socket peers and for TCP peers with the right token.
  grpc::Status Authorize(const grpc::ServerContext& ctx) const;

  Controller* const controller_;
  const std::string token_;
};

}  // namespace cairn::controller
