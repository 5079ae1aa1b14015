#include "common/grpc_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"

namespace cairn {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& what) {
  auto pem = ReadFile(path);
  if (!pem.ok()) return Annotate(pem.status(), absl::StrCat(what, " ", path));
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": not a PEM file (no -----BEGIN line)"));
  }
  return *pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(const GrpcServeOptions& o) {
  if (o.tls_cert.empty() && o.tls_key.empty()) return grpc::InsecureServerCredentials();
  if (o.tls_cert.empty() || o.tls_key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  struct stat st {};
  if (::stat(o.tls_key.c_str(), &st) != 0) return ErrnoStatus("--tls-key " + o.tls_key);
  if (st.st_uid != 0 || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--tls-key ", o.tls_key, " must be owned by root and readable by root only (chown root; chmod 600)"));
  }
  ASSIGN_OR_RETURN(std::string cert, ReadPem(o.tls_cert, "--tls-cert"));
  ASSIGN_OR_RETURN(std::string key, ReadPem(o.tls_key, "--tls-key"));
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServeOptions& o, grpc::Service* service) {
  std::shared_ptr<grpc::ServerCredentials> tcp_creds;
  if (!o.listen.empty()) {
    ASSIGN_OR_RETURN(tcp_creds, TcpCredentials(o));
  } else if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key are for TCP: give --listen too");
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + o.socket_path, grpc::InsecureServerCredentials());
  int tcp_port = 0;
  if (!o.listen.empty()) builder.AddListeningPort(o.listen, tcp_creds, &tcp_port);
  builder.RegisterService(service);
  mode_t old_umask = ::umask(0177);  // the socket is born 0600: only root can connect
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(old_umask);
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat(o.server, ": cannot serve on unix:", o.socket_path,
                                               o.listen.empty() ? "" : " and " + o.listen,
                                               " (address in use, or no permission)"));
  }
  if (!o.listen.empty() && tcp_port == 0) {
    server->Shutdown();
    return absl::UnavailableError(absl::StrCat(o.server, ": cannot listen on TCP ", o.listen));
  }
  if (::chmod(o.socket_path.c_str(), 0600) != 0) {
    server->Shutdown();
    return ErrnoStatus("chmod 0600 " + o.socket_path);
  }
  return GrpcServer{std::move(server), tcp_port};
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const std::string& target,
                                                                           const std::string& tls_ca) {
  if (absl::StartsWith(target, "unix:") || tls_ca.empty()) return grpc::InsecureChannelCredentials();
  ASSIGN_OR_RETURN(std::string ca, ReadPem(tls_ca, "--tls-ca"));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca;
  return grpc::SslCredentials(ssl);
}

}  // namespace cairn
