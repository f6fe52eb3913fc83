// `tmap ops list|show`: the built-in op library; `tmap knobs`: the schedule knobs.
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/op_library.h"

namespace tmap::cli {

void ComputeArgs::add_to(CLI::App& cmd) {
  cmd.add_option("compute", file, "A compute definition (JSON file)");
  cmd.add_option("--op", op, "A built-in op instead of a file (see 'tmap ops list')");
  // One value per occurrence, so that a positional argument after it is not taken as a value.
  cmd.add_option("--set", sets, "Override a parameter: --set N=16 (repeatable)")->allow_extra_args(false);
  cmd.add_option("--dtype", dtype,
                 "The inputs' dtype, e.g. bfloat16 or int8 (default: the compute's own; float16 for the built-in "
                 "ops); sums move to int32 for integers");
  cmd.add_option("--out-dtype", out_dtype,
                 "Store the output as this dtype, e.g. float16, summing in the compute's own accumulation dtype");
  cmd.add_option("--epilogue", epilogue,
                 "Fuse elementwise work after the contraction, e.g. 'Y[m, n] = relu(C[m, n] + bias[n])' (undeclared "
                 "tensors take the output's dtype; functions: " + epi_function_list() + ")");
}

Compute ComputeArgs::build() const {
  if (file.empty() == op.empty())
    throw UserError(format_diagnostic(SourceLoc::whole("tmap"),
                                      file.empty() ? "no compute given" : "give either a compute file or --op, not both",
                                      "name a JSON compute file, or a built-in op with --op (see 'tmap ops list')"));
  ComputeDef def = op.empty() ? load_compute_file(file) : builtin_op(op);
  set_dtypes(def, dtype, out_dtype, "--dtype", "--out-dtype");
  SourceText epilogue_text("--epilogue", epilogue);
  if (!epilogue.empty()) set_epilogue(def, epilogue, locator_for(epilogue_text), SourceLoc::whole("--epilogue"));
  return build_compute(def, parse_param_overrides(sets));
}

void HwSelection::add_to(CLI::App& cmd, const std::string& names_help) {
  if (!names_help.empty()) cmd.add_option("--hw", names, names_help)->allow_extra_args(false);
  cmd.add_option("--hw-dir", dirs, "Also load the *.json abstractions of this directory (repeatable)")
      ->allow_extra_args(false);
}

std::vector<HwAbstraction> HwSelection::all() const { return load_hw_abstractions(dirs); }

std::vector<HwAbstraction> HwSelection::chosen(const std::vector<HwAbstraction>& all) const {
  if (names.empty()) return all;
  std::vector<HwAbstraction> out;
  for (const auto& name : names) out.push_back(find_hw(all, name));
  return out;
}

namespace {

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// A validator of numbers in [min, max] (max infinite: no upper bound).
CLI::Validator number_check(double min, double max) {
  const std::string want = max == std::numeric_limits<double>::infinity()
                               ? "must be at least " + number_text(min)
                               : "must be " + number_text(min) + " to " + number_text(max);
  return CLI::Validator(
      [min, max, want](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "must be a number (got " + text + ")";
        if (!(v >= min && v <= max)) return want + " (got " + text + ")";
        return {};
      },
      want.substr(8), "");
}

}  // namespace

CLI::Validator at_least(double min) { return number_check(min, std::numeric_limits<double>::infinity()); }
CLI::Validator between(double min, double max) { return number_check(min, max); }

void bad(const std::string& option, const std::string& msg, const std::string& hint) {
  throw UserError(format_diagnostic(SourceLoc::whole(option), msg, hint));
}

void register_knobs(CLI::App& app) {
  auto* cmd = app.add_subcommand("knobs", "List the schedule knobs (--params keys): defaults, values, families");
  auto format = std::make_shared<std::string>("text");
  cmd->add_option("--format", *format, "text (a Markdown table) or json (one document on stdout)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->callback([format] {
    if (*format == "text") {
      std::cout << knob_reference_markdown();
      return;
    }
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const Knob& k : knobs())
      j.push_back({{"name", k.name}, {"default", k.default_value}, {"min", k.min}, {"max", k.max},
                   {"families", knob_takers(k)}, {"doc", k.doc}});
    std::cout << j.dump(2) << "\n";
  });
}

void register_ops(CLI::App& app) {
  auto* ops = app.add_subcommand("ops", "The built-in op library");
  ops->require_subcommand(1);
  auto* list = ops->add_subcommand("list", "List the built-in ops with their parameters");
  auto format = std::make_shared<std::string>("text");
  list->add_option("--format", *format, "text or json (one document on stdout)")->check(CLI::IsMember({"text", "json"}));
  list->callback([format] {
    if (*format == "json") {
      nlohmann::ordered_json j = nlohmann::ordered_json::array();
      for (const auto& name : builtin_op_names()) {
        ComputeDef def = builtin_op(name);
        nlohmann::ordered_json params = nlohmann::ordered_json::object();
        for (const auto& p : def.params) params[p.name] = p.value;
        j.push_back({{"name", name}, {"description", def.description}, {"compute", def.statement_text},
                     {"params", params}});
      }
      std::cout << j.dump(2) << "\n";
      return;
    }
    for (const auto& name : builtin_op_names()) {
      ComputeDef def = builtin_op(name);
      std::cout << name << "\n    " << def.description << "\n    " << def.statement_text << "\n    params:";
      for (const auto& p : def.params) std::cout << " " << p.name << "=" << p.value;
      std::cout << "\n";
    }
  });
  auto* show = ops->add_subcommand("show", "Print a built-in op as a compute file (a template for your own)");
  auto name = std::make_shared<std::string>();
  show->add_option("name", *name, "The op")->required();
  show->callback([name] { std::cout << builtin_op_source(*name) << "\n"; });
}

}  // namespace tmap::cli
