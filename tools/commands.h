// The subcommands of the `tmap` command line. Each registers itself on the app; its callback
// prints to stdout and throws tmap::UserError for bad input (exit code 2, message on stderr).
#pragma once

#include <CLI/CLI.hpp>

#include "cli_common.h"

namespace tmap::cli {

void register_map(CLI::App& app);
void register_hw(CLI::App& app);
void register_ops(CLI::App& app);
void register_knobs(CLI::App& app);
void register_run(CLI::App& app);
void register_tuning(CLI::App& app);  ///< tune, replay, logs, export
void register_model(CLI::App& app);   ///< import

/// Checks of a number option whose refusals read "must be at least 1 (got 0)", not the
/// parser's "Value 0 not in range 0.000000 to 1.79e308".
CLI::Validator at_least(double min);
CLI::Validator between(double min, double max);

/// `c` with --group-pack `pack` of its groups packed into one block-diagonal product
/// (pack_groups()); `c` itself for 1. A UserError naming the option where it cannot be packed so.
Compute packed_compute(const Compute& c, int pack);
/// Adds --group-pack to a subcommand that matches a compute (map, run).
void add_group_pack_option(CLI::App& cmd, int& pack);

}  // namespace tmap::cli
