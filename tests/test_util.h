// Small helpers shared by the table-driven tests.
#pragma once

#include <string>

#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/hw/hw_abstraction.h"
#include "tmap/runtime/device.h"
#include "tmap/support/diagnostic.h"

namespace tmap::testing {

/// Runs f and returns the UserError's message, or "<no error>" when none was thrown.
template <typename F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

/// Parses a compute definition given as JSON text, as if read from "test.json".
inline ComputeDef parse_def(const std::string& json) {
  SourceText src("test.json", json);
  return parse_compute_json(src, "test");
}

inline Compute build_json(const std::string& json, const std::vector<std::string>& sets = {}) {
  return build_compute(parse_def(json), parse_param_overrides(sets));
}

/// A built-in op whose output is stored as `out_dtype` (sums in the op's own dtype), as
/// `--out-dtype` does.
inline Compute narrowed_op(const std::string& op, const std::string& out_dtype, const std::vector<std::string>& sets) {
  ComputeDef def = builtin_op(op);
  set_output_dtype(def, *parse_dtype(out_dtype), SourceLoc::whole("--out-dtype"));
  return build_compute(def, parse_param_overrides(sets));
}

/// A compute of a built-in op with the inputs' and output's dtypes replaced (the output is "C" or
/// "Out").
inline Compute typed_op(const std::string& op, const std::string& in_t, const std::string& out_t,
                        const std::vector<std::string>& sets) {
  SourceText src("<" + op + ">", builtin_op_source(op));
  ComputeDef def = parse_compute_json(src, op);
  for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" || t.name == "Out" ? out_t : in_t);
  return build_compute(def, parse_param_overrides(sets));
}

/// The abstractions shipped in the source tree's hw_abstractions/, loaded once.
inline const std::vector<HwAbstraction>& shipped() {
  static const std::vector<HwAbstraction> all = load_hw_directory(std::string(TMAP_SOURCE_DIR) + "/hw_abstractions");
  return all;
}

/// Whether a GPU is usable here (GPU tests skip without one).
inline bool have_gpu() { return !query_runtime().devices.empty(); }

}  // namespace tmap::testing
