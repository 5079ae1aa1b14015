#pragma once
// The `cairn` commands that talk to cairn-controller: `submit`, `cluster status`,
// `cluster scale-down`, `job explain JOB` and `events`. Kept apart from main.cc, which holds the engine's commands.

#include <memory>

#include <CLI/CLI.hpp>

namespace cairn::cli {

class ControllerCommands {
 public:
  // Adds the subcommands and their options to `app`.
  explicit ControllerCommands(CLI::App& app);
  ~ControllerCommands();

  // True when the parsed command line named one of these commands.
  bool Parsed() const;
  // Runs the parsed command; returns the process exit status.
  int Run();

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace cairn::cli
