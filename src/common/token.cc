#include "common/token.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace cairn {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat token file " + path);
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "token file %s is readable by group or others (mode %o); chmod 600 it", path, st.st_mode & 0777));
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": the token must be at least 16 characters"));
  }
  return token;
}

bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace cairn
