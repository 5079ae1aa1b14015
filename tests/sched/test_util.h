#pragma once
// Small builders for scheduling tests.

#include <string>

#include "controller/cluster.h"

namespace cairn::controller::testing {

inline NodeSpec GpuNode(const std::string& id, double price, Market market = Market::kOnDemand,
                        int gpus = 1, const std::string& type = "V100") {
  NodeSpec s;
  s.id = id;
  s.capacity = {8.0 * gpus, 61 * 1024 * static_cast<int64_t>(gpus), gpus};
  s.gpu_type = type;
  s.price_per_hour = price;
  s.market = market;
  s.zone = "z1";
  s.cloud = "aws";
  return s;
}

inline JobSpec GpuJob(const std::string& id, int gpus = 1, double work_h = 10) {
  JobSpec j;
  j.id = id;
  j.request = {8.0 * gpus, 61 * 1024 * static_cast<int64_t>(gpus), gpus};
  j.work_s = work_h * 3600;
  j.checkpoint.interval_s = 600;
  j.checkpoint.pause_s = 5;
  j.checkpoint.notice_checkpoint_s = 30;
  j.checkpoint.restore_s = 40;
  j.checkpoint.on_notice = true;
  return j;
}

}  // namespace cairn::controller::testing
