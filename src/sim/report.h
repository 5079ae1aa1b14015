#pragma once
// Tables and JSON for cairn-sim's results.

#include <string>
#include <vector>

#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace cairn::sim {

struct TraceReport {
  const SpotTrace* trace = nullptr;
  std::vector<SimJobSpec> jobs;
  std::vector<SimResult> results;
  double spot_price = 0;
  double notice_s = 0;  // the interruption notice the strategies had (its cloud's)
};

// The cheapest baseline whose deadline and service attainment cairn matches or beats; null when
// cairn was not run or no baseline qualifies.
const SimResult* BestComparableBaseline(const TraceReport& r);

std::string FormatTable(const TraceReport& r, const std::string& command);
std::string FormatJson(const std::vector<TraceReport>& reports);

}  // namespace cairn::sim
