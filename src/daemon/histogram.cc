#include "daemon/histogram.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cairn::daemon {

void Histogram::Observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets_[i];
      break;
    }
  }
  ++count_;
  sum_ += seconds;
}

std::string Histogram::Render(const std::string& name, const std::string& labels) const {
  std::string sep = labels.empty() ? "" : labels + ",";
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    absl::StrAppend(&out, name, "_bucket{", sep, "le=\"", absl::StrFormat("%g", kBounds[i]), "\"} ", cumulative, "\n");
  }
  absl::StrAppend(&out, name, "_bucket{", sep, "le=\"+Inf\"} ", count_, "\n");
  std::string braces = labels.empty() ? "" : "{" + labels + "}";
  absl::StrAppend(&out, name, "_sum", braces, " ", absl::StrFormat("%.6f", sum_), "\n");
  absl::StrAppend(&out, name, "_count", braces, " ", count_, "\n");
  return out;
}

}  // namespace cairn::daemon
