// Small helpers shared by the table-driven tests.
#pragma once

#include <string>

#include "tmap/frontend/compute_loader.h"
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

/// The abstractions shipped in the source tree's hw_abstractions/, loaded once.
inline const std::vector<HwAbstraction>& shipped() {
  static const std::vector<HwAbstraction> all = load_hw_directory(std::string(TMAP_SOURCE_DIR) + "/hw_abstractions");
  return all;
}

/// Whether a GPU is usable here (GPU tests skip without one).
inline bool have_gpu() { return !query_runtime().devices.empty(); }

}  // namespace tmap::testing
