#pragma once
// Spot capacity traces (skypilot-org/spot-traces, collected for "Can't Be Late", NSDI'24):
// {"metadata": {"gap_seconds": G}, "data": [v0, v1, ...]}, one value per G seconds.
//
// Two readings of a value exist and the folder decides which one applies (kAuto):
//  - availability/...: v is how many instances of the type could be obtained at that tick
//    (0/1 in the 1-node sets, 0..16 in the 16-node set). Spot is usable iff v > 0, and at
//    most v * scale instances run at once (scale: see Simulator).
//  - preemption/...: v is a 0/1 flag from one instance kept running: 1 = preempted (not
//    running) at that tick, 0 = running. Spot is usable iff v == 0. This is how the authors'
//    own simulator reads its traces (spot available = not trace[tick]).
// docs/scheduling.md explains the choice; --reading overrides it.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::sim {

enum class TraceReading { kAuto, kCount, kPreemptedFlag };
absl::string_view ReadingName(TraceReading r);
absl::StatusOr<TraceReading> ParseReading(absl::string_view s);

// The instance a trace file is about, from its name ("us-west-2a_v100_1.json").
struct InstanceType {
  std::string name = "p3.2xlarge";
  std::string gpu_type = "V100";
  int gpus = 1;
  double on_demand_price = 3.06;  // $/h, AWS us-east-1 list price.
};

struct SpotTrace {
  std::string path;
  std::string cloud;  // "aws", "gcp", "azure": its folder's name begins with it ("aws-02-15-2023"); "" if none
  std::string zone;
  InstanceType instance;
  double gap_s = 300;
  std::vector<int> values;
  // The spot price at each tick, $/h, when the file has a "prices" array (as long as "data");
  // empty otherwise.
  std::vector<double> prices;
  TraceReading reading = TraceReading::kCount;  // resolved, never kAuto.
  int nominal_pool = 1;  // instances the trace's value counts out of (16 for the 16-node set).

  double duration_s() const { return gap_s * static_cast<double>(values.size()); }
  // Spot units usable during tick k under the reading (0 after the end of the trace).
  int Units(size_t k) const;
  // The share of ticks with spot usable.
  double SpotShare() const;
  // The mean of `prices` (0 when there are none).
  double MeanPrice() const;
};

// What a set of loaded traces may be telling wrong, one line each: spot usable in under 1% of
// ticks (a reading that does not fit the file?), and the same data loaded twice under two names.
std::vector<std::string> TraceWarnings(const std::vector<SpotTrace>& traces);

// Reads and validates a trace. Errors: NotFound/InvalidArgument naming the file and the fault.
absl::StatusOr<SpotTrace> LoadTrace(const std::string& path, TraceReading reading = TraceReading::kAuto);

// The cloud a trace's path names: the first folder whose name begins with "aws", "gcp" or
// "azure" (case-insensitive); "" when none does.
std::string CloudOfPath(const std::string& path);

// The interruption notice on `cloud`: AWS gives 2 minutes; GCP and Azure 30 s.
struct NoticeTimes {
  double aws_s = 120;
  double gcp_s = 30;
  double azure_s = 30;
};
// InvalidArgument naming the trace and what to pass when its cloud is not known.
absl::StatusOr<double> NoticeFor(const SpotTrace& trace, const NoticeTimes& times);

// A trace built in memory (tests): count reading, one zone "synthetic".
SpotTrace SyntheticTrace(double gap_s, std::vector<int> values, int nominal_pool = 1);

}  // namespace cairn::sim
