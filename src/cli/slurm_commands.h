#pragma once
// `cairn slurm ...`: SLURM's side of cairn. `agent` and `task` are started by the SPANK plugin
// (src/integrations/slurm/spank_plugin.cc) in each task of a job submitted with --cairn, not by
// people; they are hidden from the help.

#include <memory>

#include <CLI/CLI.hpp>

namespace cairn::cli {

class SlurmCommands {
 public:
  explicit SlurmCommands(CLI::App& app);
  ~SlurmCommands();

  bool Parsed() const;
  int Run();

 private:
  int Migrate();
  int Setup();

  struct Options;
  std::unique_ptr<Options> o_;
};

}  // namespace cairn::cli
