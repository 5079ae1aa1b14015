#pragma once
// What cairn-controller's API accepts from a submitter or a registering node: a job id that can
// name the job on a node daemon, and every number within a sane range (common/validate.h). The
// controller checks each SubmitJob and RegisterNode; the CLI (`cairn submit`) and cairnd (the
// node it registers) check before they send, so that all refuse with the same words. Errors are
// InvalidArgument naming the first bad field (with its CLI option), the value and what is allowed.
//
// These are the checks of what arrives; convert.h's FromApi keeps the model's own (a deadline
// for a service, no resources at all), which also apply to what is loaded from the store.

#include "absl/status/status.h"
#include "controller.pb.h"

namespace cairn::controller {

// The id (when not empty: empty means "generate one") and the numbers of a submitted job.
absl::Status CheckSubmittedJob(const api::JobSpec& spec);

// The id (the job name rule) and the numbers of a node registering itself.
absl::Status CheckNodeSpec(const api::NodeSpec& spec);

}  // namespace cairn::controller
