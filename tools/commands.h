// The subcommands of the `tmap` command line. Each registers itself on the app; its callback
// prints to stdout and throws tmap::UserError for bad input (exit code 2, message on stderr).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tmap/frontend/compute_loader.h"
#include "tmap/hw/hw_abstraction.h"

namespace tmap::cli {

void register_map(CLI::App& app);
void register_hw(CLI::App& app);
void register_ops(CLI::App& app);
void register_knobs(CLI::App& app);
void register_run(CLI::App& app);
void register_tuning(CLI::App& app);  ///< tune, replay, logs, export
void register_model(CLI::App& app);   ///< import
/// --dim NAME=VALUE arguments (import, tune --model): symbolic dimensions, each at least 1.
std::map<std::string, std::int64_t> parse_dims(const std::vector<std::string>& args);

/// How a command names its compute: a JSON file or a built-in op, plus --set overrides.
struct ComputeArgs {
  std::string file;
  std::string op;
  std::vector<std::string> sets;
  std::string dtype;      ///< --dtype: the inputs' dtype (set_input_dtype)
  std::string out_dtype;  ///< --out-dtype: store the output in this dtype (sums stay in theirs)
  std::string epilogue;   ///< --epilogue: elementwise work fused after the contraction
  /// Adds the positional file, --op, --set, --out-dtype and --epilogue to a subcommand.
  void add_to(CLI::App& cmd);
  /// Loads and builds the compute; a UserError when neither or both are given.
  Compute build() const;
};

/// Which hardware abstractions a command uses: the shipped ones plus --hw-dir directories, and,
/// where the command offers --hw, only the named ones.
struct HwSelection {
  std::vector<std::string> names;
  std::vector<std::string> dirs;
  /// Adds --hw-dir, and --hw (repeatable, described by `names_help`) unless that is empty.
  void add_to(CLI::App& cmd, const std::string& names_help = {});
  /// Every abstraction: the shipped ones and those of the directories.
  std::vector<HwAbstraction> all() const;
  /// The abstractions of `all` named by --hw; all of them when none is named.
  std::vector<HwAbstraction> chosen(const std::vector<HwAbstraction>& all) const;
};

/// The exit status a command asks for when it returns normally (130 or 143 after SIGINT or
/// SIGTERM stopped `tmap tune`); 0 unless set. main() returns it.
int& exit_status();

/// Checks of a number option whose refusals read "must be at least 1 (got 0)", not the
/// parser's "Value 0 not in range 0.000000 to 1.79e308".
CLI::Validator at_least(double min);
CLI::Validator between(double min, double max);

/// `c` with --group-pack `pack` of its groups packed into one block-diagonal product
/// (pack_groups()); `c` itself for 1. A UserError naming the option where it cannot be packed so.
Compute packed_compute(const Compute& c, int pack);
/// Adds --group-pack to a subcommand that matches a compute (map, run).
void add_group_pack_option(CLI::App& cmd, int& pack);

/// A UserError for a bad command-line value, naming the option and the fix.
[[noreturn]] void bad(const std::string& option, const std::string& msg, const std::string& hint);

}  // namespace tmap::cli
