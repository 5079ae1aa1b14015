#pragma once
// Conversions between the API's messages (proto/controller.proto) and the scheduling model
// (controller/cluster.h). Validation lives here too: what the API accepts is what the model can
// hold.

#include "absl/status/statusor.h"
#include "controller.pb.h"
#include "controller/cluster.h"
#include "controller/placement.h"

namespace cairn::controller {

// Errors: InvalidArgument naming the field (empty id, negative resources, ...).
absl::StatusOr<NodeSpec> FromApi(const api::NodeSpec& spec);
absl::StatusOr<JobSpec> FromApi(const api::JobSpec& spec);

api::NodeSpec ToApi(const NodeSpec& spec, double interruptions_per_hour);
api::JobSpec ToApi(const JobSpec& spec);
api::Candidate ToApi(const CandidateScore& c);

// Model enums as the API spells them, and back (unknown names give the default).
NodeHealth HealthFromName(absl::string_view name);
JobState JobStateFromName(absl::string_view name);
SuspendReason SuspendReasonFromName(absl::string_view name);
absl::string_view SuspendReasonName(SuspendReason r);

}  // namespace cairn::controller
