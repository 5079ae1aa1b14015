#include "common/validate.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace cairn {
namespace {

// Whole numbers in full (1125899906842624, not 1.12589990684262e+15), others in 15 digits.
std::string Shown(double v) {
  if (std::isfinite(v) && std::abs(v) < 1e18 && v == std::trunc(v)) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrFormat("%.15g", v);
}

std::string Allowed(const NumberRange& r) {
  std::string s = absl::StrCat("from ", Shown(r.min), " to ", Shown(r.max));
  if (r.zero != nullptr) absl::StrAppend(&s, ", or 0 (", r.zero, ")");
  return s;
}

bool InRange(double v, const NumberRange& r) { return (v >= r.min && v <= r.max) || (r.zero != nullptr && v == 0); }

}  // namespace

absl::Status CheckJobName(absl::string_view name, absl::string_view what) {
  bool ok = !name.empty() && name.size() <= kMaxJobName && absl::ascii_isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name) ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("invalid ", what, " '", absl::CHexEscape(name), "': use ", kJobNameRule));
}

absl::Status CheckNumber(absl::string_view field, double value, const NumberRange& range) {
  if (std::isfinite(value) && InRange(value, range)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " ", Shown(value), ": give a finite number ", Allowed(range)));
}

absl::Status CheckInteger(absl::string_view field, int64_t value, const NumberRange& range) {
  if (InRange(static_cast<double>(value), range)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " ", value, ": give a whole number ", Allowed(range)));
}

}  // namespace cairn
