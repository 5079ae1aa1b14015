#include "common/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace cairn {

namespace {

void Install(std::shared_ptr<spdlog::logger> logger, int verbosity) {
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e level=%l %v");
  logger->set_level(verbosity >= 2 ? spdlog::level::debug
                    : verbosity == 1 ? spdlog::level::info
                                     : spdlog::level::warn);
  logger->flush_on(spdlog::level::debug);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace

void InitLogging(int verbosity) {
  spdlog::drop("cairn");
  Install(spdlog::stderr_color_mt("cairn"), verbosity);
}

void LogToFile(const std::string& path, int verbosity) {
  spdlog::drop("cairn");
  Install(spdlog::basic_logger_mt("cairn", path), verbosity);
}

}  // namespace cairn
