#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace cairn {

void InitLogging(int verbosity) {
  auto logger = spdlog::stderr_color_mt("cairn");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e level=%l %v");
  logger->set_level(verbosity >= 2 ? spdlog::level::debug
                    : verbosity == 1 ? spdlog::level::info
                                     : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace cairn
