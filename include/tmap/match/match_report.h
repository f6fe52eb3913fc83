// Matching one compute against every hardware abstraction: the matches with their mappings
// and the abstractions rejected with reasons. This is what `tmap map` prints.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/match/mapping.h"

namespace tmap {

/// One applicable intrinsic: an abstraction with one of its layouts and shapes.
struct Match {
  std::string hw_abs;
  std::string layout;
  IntrinsicShape shape;
  ExprMatch roles;
  IndexMatch index;
  std::vector<Mapping> mappings;  ///< With feasibility for `shape`.
};

struct Rejection {
  std::string hw_abs;
  MatchFailure failure = MatchFailure::kNone;
  std::string reason;
};

struct MatchReport {
  Enumeration enumeration = Enumeration::kAmos;
  std::vector<Match> matches;
  std::vector<Rejection> rejected;
};

/// Runs the three stages against each abstraction; a match is reported per layout and shape.
MatchReport match_compute(const Compute& c, const std::vector<HwAbstraction>& hws, Enumeration e);

/// {"workload": {...}, "matches": [...], "rejected": [...]}, the document of `tmap map
/// --format json`. Operands name the compute's tensors that play A, B and D.
nlohmann::json to_json(const Compute& c, const MatchReport& r);

}  // namespace tmap
