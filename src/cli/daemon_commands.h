#pragma once
// The `cairn` commands that talk to the node daemon (cairnd): `job run|list|show|logs|kill|
// checkpoint|restore|delete|watch` and `checkpoint list|show|delete|pin`. They share the `job`
// command with the controller's `job explain` (controller_commands.h). Kept apart from main.cc,
// which holds the engine's commands.

#include <memory>

#include <CLI/CLI.hpp>

namespace cairn::cli {

class DaemonCommands {
 public:
  // Adds the subcommands to `app`, under its existing `job` command when there is one.
  explicit DaemonCommands(CLI::App& app);
  ~DaemonCommands();

  // True when the parsed command line named one of these commands.
  bool Parsed() const;
  // Runs the parsed command; returns the process exit status.
  int Run();

 private:
  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace cairn::cli
