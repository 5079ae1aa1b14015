#include "cli/output.h"

#include <cstdio>
#include <ctime>
#include <limits>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

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

namespace {

// The fields that hold a moment as unix seconds (a double), by name, in the daemon's and the
// controller's messages.
bool IsTimeField(const std::string& name) {
  static const std::set<std::string> kTimes = {
      "created", "ended",     "started",         "deadline",           "received",        "time",
      "since",   "submit_time", "last_progress_time", "checkpoint_time", "ended_time",      "restore_from_time",
      "taken_before"};
  return kTimes.count(name) != 0;
}

// "2026-12-06T04:15:10.558Z".
std::string Rfc3339(double unix_s) {
  time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  int ms = static_cast<int>((unix_s - static_cast<double>(t)) * 1000);
  return absl::StrFormat("%s.%03dZ", buf, std::clamp(ms, 0, 999));
}

void FixValue(nlohmann::json& v, const google::protobuf::FieldDescriptor& f);

// Walks `j` (the proto3 JSON of a message of type `d`) and rewrites what proto3's mapping
// writes for machines into what people and scripts read.
void FixMessage(nlohmann::json& j, const google::protobuf::Descriptor& d) {
  if (!j.is_object()) return;
  for (int i = 0; i < d.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& f = *d.field(i);
    auto it = j.find(f.name());
    if (it == j.end()) continue;
    if (f.is_map()) {
      const google::protobuf::FieldDescriptor& value = *f.message_type()->map_value();
      for (auto& [k, v] : it->items()) FixValue(v, value);
    } else if (f.is_repeated()) {
      for (nlohmann::json& v : *it) FixValue(v, f);
    } else {
      FixValue(*it, f);
    }
  }
}

void FixValue(nlohmann::json& v, const google::protobuf::FieldDescriptor& f) {
  using FD = google::protobuf::FieldDescriptor;
  switch (f.cpp_type()) {
    case FD::CPPTYPE_MESSAGE:
      FixMessage(v, *f.message_type());
      break;
    case FD::CPPTYPE_INT64:
      if (v.is_string()) v = std::stoll(v.get<std::string>());
      break;
    case FD::CPPTYPE_UINT64:
      if (v.is_string()) v = std::stoull(v.get<std::string>());
      break;
    case FD::CPPTYPE_DOUBLE:
      if (IsTimeField(f.name()) && v.is_number()) v = v.get<double>() > 0 ? nlohmann::json(Rfc3339(v.get<double>())) : nullptr;
      break;
    default:
      break;
  }
}

}  // namespace

std::string ToJson(const google::protobuf::Message& m, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions jo;
  jo.preserve_proto_field_names = true;
  jo.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(m, &out, jo).ok()) return "";
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return "";
  FixMessage(j, *m.GetDescriptor());
  return j.dump(pretty ? 2 : -1) + "\n";
}

int PrintJson(const google::protobuf::Message& m) {
  std::string out = ToJson(m, /*pretty=*/true);
  if (out.empty()) return Fail("cannot encode the reply as JSON");
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
