// Mappings of software iterators onto an intrinsic's axes, and their feasibility.
//
// A mapping assigns to each intrinsic axis (i, j, k) a set of the candidate iterators of the
// index match; the iterators of a set are fused into that axis (their extents multiply), and
// every other iterator stays an outer loop. An axis with no candidate stays unmapped: extent 1,
// padded to the intrinsic's extent (how GEMV and depthwise convolution reach Tensor Cores). A
// mapped axis smaller than the intrinsic's side is padded the same way (masked loads, zero fill):
// every mapping can be generated, and its padding waste says what it costs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tmap/hw/hw_abstraction.h"
#include "tmap/ir/compute.h"
#include "tmap/match/matcher.h"

namespace tmap {

enum class Enumeration {
  /// AMOS's rule: an iterator chosen for one axis of an operand needs a partner chosen for the
  /// other axis of that operand that indexes a different dimension of the software tensor, in
  /// both directions (e.g. conv2d's p and r index one input dimension and are not partners).
  kAmos,
  /// Every combination the implicit-GEMM code generator can implement: its gathers make the
  /// partner rule unnecessary.
  kAll,
};
std::string_view enumeration_name(Enumeration e);  ///< "amos", "all"

struct Mapping {
  /// Stable id: the position of this axis assignment in the `all` enumeration of its index
  /// match, so that one id names one assignment whatever the enumeration.
  int id = -1;
  std::array<std::vector<int>, 3> axes;  ///< Iterator ids fused into i, j, k (empty: unmapped).
  std::array<std::int64_t, 3> fused_extent{1, 1, 1};
  /// The mapped axes smaller than the intrinsic's side, padded up to it ("axis i fuses {n} of
  /// extent 1, padded to the intrinsic's m = 16"); empty when every mapped axis fills the side.
  std::string padding;
  double padding_waste = 0.0;  ///< Fraction of intrinsic work spent on padding.
  /// AMOS's feasibility: no mapped axis is smaller than the intrinsic (AMOS rejects the others).
  bool fits() const { return padding.empty(); }
  bool operator==(const Mapping&) const = default;
};

/// Enumerates the mappings of an index match, ordered by id. Axis sets are non-empty subsets
/// of each axis's candidates (in bitmask order over the candidates), the empty set only for an
/// axis without candidates.
/// Mappings of one match are every subset of each axis's candidate iterators (2^n - 1 per axis):
/// beyond this many, enumeration is refused with a UserError that says how to shrink the compute.
inline constexpr double kMaxMappingsPerMatch = 65536;

std::vector<Mapping> enumerate_mappings(const Compute& c, const IndexMatch& index, const ExprMatch& roles,
                                        Enumeration e);

/// Fills the fused extents, padding and padding waste for one intrinsic shape. A mapped axis
/// whose fused extent is smaller than the intrinsic's extent along it is padded (named in
/// `padding`; AMOS calls such a mapping infeasible); an unmapped axis is padded silently.
void check_feasibility(const Compute& c, const IntrinsicShape& shape, Mapping& m);

/// "{n, p}" style text of one axis set.
std::string axis_set_text(const Compute& c, const std::vector<int>& iters);

}  // namespace tmap
