#pragma once
// Starting cairnd's and cairn-controller's gRPC servers the same way: a root-only unix socket
// (created 0600 in a directory PrepareServerSocket checked), and optionally a TCP port, in TLS
// when a certificate and key are given. Every TCP call must still carry the bearer token
// (grpc_auth.h): TLS keeps the token and the traffic private, the token says who may call.
//
// And the client's half: the credentials for a target, TLS with a given CA for TCP targets.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cairn {

struct GrpcServeOptions {
  std::string socket_path;  // served as unix:PATH
  std::string listen;       // HOST:PORT, or empty for no TCP
  std::string tls_cert;     // PEM certificate chain; with tls_key, TCP is served in TLS
  std::string tls_key;      // PEM private key: a root-owned file that others cannot read
  std::string server;       // "cairnd", for messages
};

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int tcp_port = 0;  // the TCP port bound (the one asked for, or the one chosen for port 0)
};

// Builds and starts the server with `service` registered. Errors name the address that could
// not be served and the file that could not be used.
absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServeOptions& opts, grpc::Service* service);

// The channel credentials for `target` ("unix:PATH" or "HOST:PORT"): unix sockets in the clear;
// TCP in TLS verified against the CA certificates in `tls_ca` (PEM) when given, else in the
// clear. Fails when `tls_ca` cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const std::string& target,
                                                                           const std::string& tls_ca);

}  // namespace cairn
