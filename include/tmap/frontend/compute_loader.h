// Compute definitions: reading them (JSON files, the built-in op library) and building the
// concrete IR (tmap/ir/compute.h) for given parameter values.
//
// A compute file is one JSON object:
//   {
//     "name": "conv1d",                                  (optional; default: the file's stem)
//     "description": "...",                              (optional)
//     "compute": "Out[n, k, q] += I[n, c, q*stride + s - pad] * Wt[k, c, s]",
//     "params": {"N": 1, "C": 64, ...},                  (integer defaults, overridable)
//     "tensors": {"I": {"shape": ["N", "C", "W"], "dtype": "float16"}, ...},
//     "iterators": {"k": "K / groups"},                  (extents of iterators that index no
//                                                         dimension directly; optional)
//     "requires": ["K % groups == 0"],                   (conditions on parameters; optional)
//     "accumulate": "float32",                           (the dtype sums are kept in when the output
//                                                         is narrower; optional, default the output's)
//     "epilogue": "Y[n, k, q] = relu(Out[n, k, q] + bias[k])"
//                                                        (elementwise work on the sums before they are
//                                                         stored, see ir/epilogue.h; optional)
//   }
//
// An epilogue's tensors may be left undeclared: its result then takes the output's shape and
// dtype, and an operand the output's dtype and the smallest shape its indices fit in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tmap/frontend/parser.h"
#include "tmap/ir/compute.h"

namespace tmap {

struct ParamDecl {
  std::string name;
  std::int64_t value = 0;
  SourceLoc loc;
};

struct TensorDecl {
  std::string name;
  std::vector<Expr> shape;
  DType dtype = DType::kFloat32;
  SourceLoc loc;        ///< The tensor's key.
  SourceLoc dtype_loc;  ///< Its "dtype" value.
};

struct ExtentDecl {
  std::string iterator;
  Expr extent;
  SourceLoc loc;
};

struct RequirementDecl {
  Expr condition;
  SourceLoc loc;
};

/// A compute definition as written: sizes are still expressions over parameters.
struct ComputeDef {
  std::string name;
  std::string description;
  std::string statement_text;
  StatementDecl statement;
  std::vector<ParamDecl> params;
  std::vector<TensorDecl> tensors;
  std::vector<ExtentDecl> extents;
  std::vector<RequirementDecl> requirements;
  /// "accumulate": the dtype sums are kept in, when not the output's (float32 sums stored as
  /// float16, say).
  std::optional<DType> accumulate;
  SourceLoc accumulate_loc;
  std::optional<EpilogueDecl> epilogue;
  SourceLoc loc;  ///< The file.
};

/// Parses the JSON text of a compute definition; `default_name` is used when it has no "name".
ComputeDef parse_compute_json(const SourceText& source, const std::string& default_name);
/// Reads and parses a compute file.
ComputeDef load_compute_file(const std::string& path);

/// Stores the output in `dtype` (an --out-dtype override, located at `loc`), keeping the sums in
/// the dtype the definition accumulates in: float32 sums of a built-in op written as float16.
void set_output_dtype(ComputeDef& def, DType dtype, const SourceLoc& loc);

/// Gives the contraction's operands `dtype` (a --dtype override, located at `loc`). Sums that
/// cannot hold their products (float32 sums of int8 inputs, say) move to the natural
/// accumulator of the inputs' kind: int32 for integers, float64 for float64, else float32. A
/// UserError for tfloat32, a precision of the Tensor Cores and no storage type.
void set_input_dtype(ComputeDef& def, DType dtype, const SourceLoc& loc);

/// The inputs' and the output's dtypes by name (either may be empty: the definition's own),
/// `inputs_name` and `output_name` naming them in errors (an unknown dtype, a tfloat32 input):
/// set_input_dtype, then set_output_dtype.
void set_dtypes(ComputeDef& def, const std::string& inputs, const std::string& output, const std::string& inputs_name,
                const std::string& output_name);

/// Appends the epilogue `text` (located by `locate`) to a definition that has none.
void set_epilogue(ComputeDef& def, std::string_view text, const Locator& locate, const SourceLoc& loc);

/// A "--set NAME=VALUE" parameter override, or "--set NAME=LO..HI", a range of sizes that
/// kernels take at run time (Compute::dynamic).
struct ParamOverride {
  std::string name;
  std::int64_t value = 0;  ///< A range's largest size.
  SourceLoc loc;
  std::int64_t lo = 0;  ///< A range's smallest size; with `range` false, unused.
  bool range = false;
};
/// A range spans at most this many sizes: each one is built and checked.
inline constexpr std::int64_t kMaxRangeSizes = 4096;
/// Parses "NAME=VALUE" and "NAME=LO..HI" arguments (errors name the argument).
std::vector<ParamOverride> parse_param_overrides(const std::vector<std::string>& args);

/// Builds the concrete compute: evaluates parameters (with overrides), checks requirements,
/// tensor shapes (positive, within 32-bit indexing), the statement's tensors and ranks, infers
/// iterator extents (which must agree), and checks that the output is written exactly once.
/// With a range (at most one), the compute of its largest size with Compute::dynamic set: every
/// size of the range must build, and build what compute_at() gives, else a UserError naming
/// the range and the rule it breaks.
Compute build_compute(const ComputeDef& def, const std::vector<ParamOverride>& overrides = {});

/// The compute of a log record or other file written by tmap (`recorded`, to_json of a compute),
/// trusted no further than a compute file: it is rebuilt from its statement, tensors and
/// extents by build_compute, with every check that implies (output in bounds and written once,
/// 32-bit index arithmetic, extents and shapes positive, names identifiers), and must equal what
/// was recorded and, unless `key` is empty, hash to `key`. A UserError naming `what` otherwise.
Compute rebuild_recorded_compute(const nlohmann::json& recorded, const std::string& key, const std::string& what);

}  // namespace tmap
