#pragma once
// What cairnd's and cairn-controller's gRPC services share: who may call, and how an
// absl::Status becomes a gRPC one.

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cairn {

// The same code and message (absl and gRPC status codes are the same numbers).
grpc::Status ToGrpc(const absl::Status& s);

// Callers on the unix socket (root-only) pass. A TCP caller must send `authorization:
// Bearer TOKEN` with the server's token, compared in constant time; with no token (empty)
// every TCP call is refused. `server` names the server in the refusal ("cairnd").
grpc::Status AuthorizeCaller(const grpc::ServerContext& ctx, absl::string_view token, absl::string_view server);

}  // namespace cairn
