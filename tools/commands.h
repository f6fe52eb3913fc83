// The subcommands of the `tmap` command line. Each registers itself on the app; its callback
// prints to stdout and throws tmap::UserError for bad input (exit code 2, message on stderr).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tmap/frontend/compute_loader.h"

namespace tmap::cli {

void register_map(CLI::App& app);
void register_hw(CLI::App& app);
void register_ops(CLI::App& app);
void register_run(CLI::App& app);
void register_tuning(CLI::App& app);  ///< tune, replay, logs

/// How a command names its compute: a JSON file or a built-in op, plus --set overrides.
struct ComputeArgs {
  std::string file;
  std::string op;
  std::vector<std::string> sets;
  /// Adds the positional file, --op and --set to a subcommand.
  void add_to(CLI::App& cmd);
  /// Loads and builds the compute; a UserError when neither or both are given.
  Compute build() const;
};

}  // namespace tmap::cli
