#include "cli/output.h"

#include <cstdio>
#include <ctime>
#include <limits>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cli/exit_codes.h"

namespace cairn::cli {

int Fail(const std::string& msg) { return Fail(absl::StatusCode::kUnknown, msg); }

int Fail(absl::StatusCode code, const std::string& msg) {
  std::fprintf(stderr, "cairn: error: %s\n", msg.c_str());
  return ExitFor(code);
}

int Fail(const absl::Status& s) { return Fail(s.code(), std::string(s.message())); }

int PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions jo;
  jo.add_whitespace = true;
  jo.preserve_proto_field_names = true;
  jo.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(m, &out, jo).ok()) return Fail("cannot encode the reply as JSON");
  std::printf("%s", out.c_str());
  return 0;
}

std::string TimeString(double unix_s) {
  if (unix_s <= 0) return "-";
  time_t t = static_cast<time_t>(unix_s);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", b, units[u]);
}

int64_t ParseSize(std::string s) {
  s = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(s));
  int64_t mult = 1;
  if (!s.empty() && (s.back() == 'B')) s.pop_back();
  if (!s.empty() && s.back() == 'I') s.pop_back();
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': mult = int64_t{1} << 10; break;
      case 'M': mult = int64_t{1} << 20; break;
      case 'G': mult = int64_t{1} << 30; break;
      case 'T': mult = int64_t{1} << 40; break;
      default: break;
    }
    if (mult != 1) s.pop_back();
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < 0 || v > std::numeric_limits<int64_t>::max() / mult) return -1;
  return v * mult;
}

}  // namespace cairn::cli
