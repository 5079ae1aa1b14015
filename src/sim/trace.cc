#include "sim/trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cairn::sim {

absl::string_view ReadingName(TraceReading r) {
  switch (r) {
    case TraceReading::kAuto: return "auto";
    case TraceReading::kCount: return "count";
    case TraceReading::kPreemptedFlag: return "preempted-flag";
  }
  return "?";
}

absl::StatusOr<TraceReading> ParseReading(absl::string_view s) {
  if (s == "auto") return TraceReading::kAuto;
  if (s == "count") return TraceReading::kCount;
  if (s == "preempted-flag" || s == "flag") return TraceReading::kPreemptedFlag;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace reading '", s, "' (use auto, count or preempted-flag)"));
}

int SpotTrace::Units(size_t k) const {
  if (k >= values.size()) return 0;
  int v = values[k];
  if (reading == TraceReading::kPreemptedFlag) return v == 0 ? 1 : 0;
  return std::max(0, v);
}

namespace {

// The instances cairn-sim knows, by the GPU and count a trace's file name gives
// (<zone>_<gpu>_<count>). Prices: AWS on-demand list prices, us-east-1.
struct CatalogueEntry {
  const char* gpu;
  int count;
  InstanceType instance;
};
const CatalogueEntry kCatalogue[] = {
    {"v100", 1, {"p3.2xlarge", "V100", 1, 3.06}},  {"v100", 4, {"p3.8xlarge", "V100", 4, 12.24}},
    {"v100", 8, {"p3.16xlarge", "V100", 8, 24.48}}, {"k80", 1, {"p2.xlarge", "K80", 1, 0.90}},
    {"k80", 8, {"p2.8xlarge", "K80", 8, 7.20}},     {"k80", 16, {"p2.16xlarge", "K80", 16, 14.40}},
};

// The instance a file name names; InvalidArgument naming the name and the catalogue otherwise
// (a trace of another instance must not be simulated with a V100's shape and price).
absl::StatusOr<InstanceType> InstanceFromName(const std::string& path, absl::string_view stem) {
  std::vector<std::string> parts = absl::StrSplit(stem, '_');
  int count = 0;
  if (parts.size() == 3 && absl::SimpleAtoi(parts[2], &count)) {
    for (const CatalogueEntry& e : kCatalogue) {
      if (parts[1] == e.gpu && count == e.count) return e.instance;
    }
  }
  std::vector<std::string> known;
  for (const CatalogueEntry& e : kCatalogue) {
    known.push_back(absl::StrCat(e.gpu, "_", e.count, " (", e.instance.name, ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "trace ", path, ": its name does not say an instance cairn-sim knows: expected ZONE_GPU_COUNT.json with "
      "GPU_COUNT one of ", absl::StrJoin(known, ", "),
      " — the instance's shape and on-demand price come from it; rename the file, or add the instance to the "
      "catalogue (src/sim/trace.cc)"));
}

}  // namespace

absl::StatusOr<SpotTrace> LoadTrace(const std::string& path, TraceReading reading) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("trace ", path, ": cannot open"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": not JSON: ", e.what()));
  }
  SpotTrace t;
  t.path = path;
  t.cloud = CloudOfPath(path);
  try {
    if (!j.contains("metadata") || !j["metadata"].contains("gap_seconds") || !j.contains("data")) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace ", path, ": expected {\"metadata\":{\"gap_seconds\":G},\"data\":[...]}"));
    }
    t.gap_s = j["metadata"]["gap_seconds"].get<double>();
    for (const auto& v : j["data"]) t.values.push_back(static_cast<int>(v.get<double>()));
    if (j.contains("prices")) {
      for (const auto& p : j["prices"]) t.prices.push_back(p.get<double>());
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": bad field: ", e.what()));
  }
  if (t.gap_s <= 0 || t.values.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": empty, or gap_seconds <= 0"));
  }
  if (!t.prices.empty() && t.prices.size() != t.values.size()) {
    return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": ", t.prices.size(), " prices for ",
                                                   t.values.size(), " values: one price per tick"));
  }
  for (double p : t.prices) {
    if (!std::isfinite(p) || p < 0) {
      return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": a price of ", p, " $/h"));
    }
  }
  std::string stem = std::filesystem::path(path).stem().string();
  t.zone = stem.substr(0, stem.find('_'));
  absl::StatusOr<InstanceType> instance = InstanceFromName(path, stem);
  if (!instance.ok()) return instance.status();
  t.instance = *instance;
  if (reading == TraceReading::kAuto) {
    reading = absl::StrContains(path, "preemption") ? TraceReading::kPreemptedFlag
                                                     : TraceReading::kCount;
  }
  t.reading = reading;
  int max_v = *std::max_element(t.values.begin(), t.values.end());
  int min_v = *std::min_element(t.values.begin(), t.values.end());
  // The reading is checked against the values: a flag is 0 or 1, a count is never negative.
  if (min_v < 0) return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": a negative value, ", min_v));
  if (reading == TraceReading::kPreemptedFlag && max_v > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace ", path, ": read as a 0/1 preempted flag, but it holds ", max_v,
        ": its values look like counts of instances (--reading count)"));
  }
  t.nominal_pool = absl::StrContains(path, "16-node") ? 16 : std::max(1, max_v);
  if (reading == TraceReading::kPreemptedFlag) t.nominal_pool = 1;
  return t;
}

double SpotTrace::SpotShare() const {
  size_t usable = 0;
  for (size_t k = 0; k < values.size(); ++k) usable += Units(k) > 0;
  return values.empty() ? 0 : static_cast<double>(usable) / static_cast<double>(values.size());
}

double SpotTrace::MeanPrice() const {
  double sum = 0;
  for (double p : prices) sum += p;
  return prices.empty() ? 0 : sum / static_cast<double>(prices.size());
}

std::vector<std::string> TraceWarnings(const std::vector<SpotTrace>& traces) {
  std::vector<std::string> out;
  for (size_t i = 0; i < traces.size(); ++i) {
    const SpotTrace& t = traces[i];
    if (double share = t.SpotShare(); share < 0.01) {
      out.push_back(absl::StrFormat(
          "trace %s: spot usable in %.2f%% of ticks under the reading '%s': is that the right reading of its "
          "values (--reading)?",
          t.path, 100 * share, ReadingName(t.reading)));
    }
    for (size_t k = 0; k < i; ++k) {
      if (traces[k].values == t.values && traces[k].gap_s == t.gap_s) {
        out.push_back(absl::StrCat("trace ", t.path, " holds the same data as ", traces[k].path,
                                   ": the same capacity counted twice"));
      }
    }
  }
  return out;
}

std::string CloudOfPath(const std::string& path) {
  for (const auto& part : std::filesystem::path(path).parent_path()) {
    std::string name = absl::AsciiStrToLower(part.string());
    for (const char* cloud : {"aws", "gcp", "azure"}) {
      if (absl::StartsWith(name, cloud)) return cloud;
    }
  }
  return "";
}

absl::StatusOr<double> NoticeFor(const SpotTrace& trace, const NoticeTimes& times) {
  if (trace.cloud == "aws") return times.aws_s;
  if (trace.cloud == "gcp") return times.gcp_s;
  if (trace.cloud == "azure") return times.azure_s;
  return absl::InvalidArgumentError(absl::StrCat(
      "trace ", trace.path, ": its cloud (and so its interruption notice) is not known: no folder of its path begins "
      "with aws, gcp or azure; put it under such a folder (as the public traces are: aws-02-15-2023/...) or pass "
      "--cloud aws|gcp|azure"));
}

SpotTrace SyntheticTrace(double gap_s, std::vector<int> values, int nominal_pool) {
  SpotTrace t;
  t.path = "synthetic";
  t.zone = "synthetic";
  t.gap_s = gap_s;
  t.values = std::move(values);
  t.reading = TraceReading::kCount;
  t.nominal_pool = nominal_pool;
  return t;
}

}  // namespace cairn::sim
