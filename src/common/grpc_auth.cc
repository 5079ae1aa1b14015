#include "common/grpc_auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/token.h"

namespace cairn {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status AuthorizeCaller(const grpc::ServerContext& ctx, absl::string_view token, absl::string_view server) {
  if (absl::StartsWith(ctx.peer(), "unix:")) return grpc::Status::OK;
  if (token.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("this ", server, " accepts TCP calls only with a token (--token-file)"));
  }
  auto it = ctx.client_metadata().find("authorization");
  if (it != ctx.client_metadata().end()) {
    absl::string_view got(it->second.data(), it->second.size());
    if (absl::ConsumePrefix(&got, "Bearer ") && SameSecret(got, token)) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      absl::StrCat("missing or wrong token: TCP calls to ", server,
                                   " need `authorization: Bearer TOKEN` (cairn: --token-file FILE or CAIRN_TOKEN)"));
}

}  // namespace cairn
