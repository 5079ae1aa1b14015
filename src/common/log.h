#pragma once
// One structured logger for the whole project: key=value pairs, quiet by default.
// `cairn -v` raises the level to debug.

#include <spdlog/spdlog.h>

#include <string>

namespace cairn {

// Configures the process-wide logger (stderr). verbosity 0 = warnings, 1 = info, 2+ = debug.
void InitLogging(int verbosity);

// The same logger, writing to the file at `path` (appended to) instead: for a process whose
// stderr is someone else's (criu-compat's, during a restore: the container's).
void LogToFile(const std::string& path, int verbosity);

}  // namespace cairn

#define CAIRN_LOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
#define CAIRN_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define CAIRN_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
