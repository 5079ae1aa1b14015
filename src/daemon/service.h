#pragma once
// The gRPC face of cairnd (proto/daemon.proto): checks the caller, then asks the Daemon.
// Calls over the unix socket are trusted (the socket is 0600 in a root-owned directory);
// calls over TCP must carry `authorization: Bearer TOKEN` or are refused UNAUTHENTICATED.
//
// Thread safety: gRPC calls the handlers from its own threads; the Daemon is thread-safe.

#include <atomic>
#include <string>

#include <grpcpp/grpcpp.h>

#include "daemon.grpc.pb.h"
#include "daemon/daemon.h"

namespace cairn::daemon {

class GrpcService final : public api::Daemon::Service {
 public:
  // `token`: empty means TCP calls are all refused.
  GrpcService(Daemon* daemon, std::string token) : daemon_(daemon), token_(std::move(token)) {}
  // Ends every Watch stream (before the server shuts down).
  void Stop() { stopping_ = true; }

  grpc::Status NodeInfo(grpc::ServerContext*, const api::NodeInfoRequest*, api::NodeInfoResponse*) override;
  grpc::Status RunJob(grpc::ServerContext*, const api::RunJobRequest*, api::RunJobResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const api::ListJobsRequest*, api::ListJobsResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const api::GetJobRequest*, api::GetJobResponse*) override;
  grpc::Status JobLogs(grpc::ServerContext*, const api::JobLogsRequest*, api::JobLogsResponse*) override;
  grpc::Status AttachJob(grpc::ServerContext*, const api::AttachJobRequest*,
                         grpc::ServerWriter<api::AttachJobOutput>*) override;
  grpc::Status KillJob(grpc::ServerContext*, const api::KillJobRequest*, api::KillJobResponse*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const api::DeleteJobRequest*, api::DeleteJobResponse*) override;
  grpc::Status CheckpointJob(grpc::ServerContext*, const api::CheckpointJobRequest*,
                             api::CheckpointJobResponse*) override;
  grpc::Status RestoreJob(grpc::ServerContext*, const api::RestoreJobRequest*, api::RestoreJobResponse*) override;
  grpc::Status ListCheckpoints(grpc::ServerContext*, const api::ListCheckpointsRequest*,
                               api::ListCheckpointsResponse*) override;
  grpc::Status GetCheckpoint(grpc::ServerContext*, const api::GetCheckpointRequest*,
                             api::GetCheckpointResponse*) override;
  grpc::Status DeleteCheckpoint(grpc::ServerContext*, const api::DeleteCheckpointRequest*,
                                api::DeleteCheckpointResponse*) override;
  grpc::Status CollectGarbage(grpc::ServerContext*, const api::CollectGarbageRequest*,
                              api::CollectGarbageResponse*) override;
  grpc::Status MigrationProgress(grpc::ServerContext*, const api::MigrationProgressRequest*,
                                 api::MigrationProgressResponse*) override;
  grpc::Status PinCheckpoint(grpc::ServerContext*, const api::PinCheckpointRequest*,
                             api::PinCheckpointResponse*) override;
  grpc::Status Watch(grpc::ServerContext*, const api::WatchRequest*, grpc::ServerWriter<api::Event>*) override;
  grpc::Status MigrateJob(grpc::ServerContext*, const api::MigrateJobRequest*, api::MigrateJobResponse*) override;
  grpc::Status ReceiveJob(grpc::ServerContext*,
                          grpc::ServerReaderWriter<api::MigrationReply, api::MigrationMessage>*) override;
  grpc::Status SettleMigration(grpc::ServerContext*, const api::SettleMigrationRequest*,
                               api::SettleMigrationResponse*) override;
  grpc::Status MigrationOutcome(grpc::ServerContext*, const api::MigrationOutcomeRequest*,
                                api::MigrationOutcomeResponse*) override;
  grpc::Status ReleaseNetwork(grpc::ServerContext*, const api::ReleaseNetworkRequest*,
                              api::ReleaseNetworkResponse*) override;
  grpc::Status CheckpointRank(grpc::ServerContext*,
                              grpc::ServerReaderWriter<api::RankCheckpointReply, api::RankCheckpointMessage>*) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext& ctx) const;

  Daemon* daemon_;
  std::string token_;
  std::atomic<bool> stopping_{false};
};

}  // namespace cairn::daemon
