// What the commands share that needs no command-line parser: how a command names its compute
// and abstractions, its exit status and its errors (commands.h adds the parser's side). Units
// that only run a command include this, not CLI11, which is slow to compile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tmap/frontend/compute_loader.h"
#include "tmap/hw/hw_abstraction.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tmap::cli {

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

/// A UserError for a bad command-line value, naming the option and the fix.
[[noreturn]] void bad(const std::string& option, const std::string& msg, const std::string& hint);

}  // namespace tmap::cli
