// The virtual GEMM a mapping defines, the input of every emitter.
//
// M is the product of the extents of the iterators fused into axis i, N into j, K into k (an
// unmapped axis has extent 1). Iterators that index the output but are not mapped are batch
// dimensions of the grid; reductions that are not mapped are serial loops around the K loop.
// Each operand element is found from its virtual coordinates through the mapping and the
// compute's affine indices, in place; or, in a relayout view (relayout_view()), in a copy of the
// operand made channels-last by a prologue kernel, where its reduction axis is contiguous.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tmap/hw/hw_abstraction.h"
#include "tmap/ir/compute.h"
#include "tmap/match/match_report.h"

namespace tmap {

/// How a relayout view copies one operand: its tensor seen as [outer][moved][inner] (the
/// dimension indexed by the reduction iterator, and those before and after it) is copied to
/// [outer][inner][moved], so that the moved dimension is innermost.
struct OperandRelayout {
  bool active = false;
  std::int64_t outer = 1, moved = 1, inner = 1;
  /// [moved] in the copy: `moved`, or more, the rest zeros (channels padded to whole vectors of
  /// the view's width, C = 3 -> 8 for 2-byte elements in 16-byte vectors, -> 4 in 8-byte ones);
  /// 0 reads as `moved`.
  std::int64_t padded = 0;
  int bytes = 2;  ///< Bytes per element.
  std::int64_t elements() const { return outer * moved * inner; }  ///< Read from the operand.
  std::int64_t copy_moved() const { return padded > moved ? padded : moved; }
  std::int64_t copy_elements() const { return outer * copy_moved() * inner; }  ///< Written to the copy.
  bool pads() const { return copy_moved() > moved; }
};

struct ImplicitGemm {
  /// The compute the kernel reads: the user's, or in a relayout view a copy (owned by
  /// `view_owner`) whose relayouted operands have their dimensions in the copies' order.
  const Compute* compute = nullptr;
  const HwAbstraction* hw = nullptr;
  std::string layout;    ///< The match's layout key ("nnn", ...).
  IntrinsicShape shape;  ///< The intrinsic's m x n x k.
  int a_input = 0, b_input = 1;  ///< Compute::inputs playing A and B.
  /// Iterator ids of each virtual dimension, slowest first (mixed radix, last is fastest).
  std::vector<int> m_iters, n_iters, k_iters;
  std::vector<int> batch_iters;      ///< Unmapped output iterators: the grid's z dimension.
  std::vector<int> serial_iters;     ///< Unmapped reductions: serial loops in the kernel.
  std::int64_t M = 1, N = 1, K = 1, batch = 1, serial = 1;
  /// With a dynamic extent (Compute::dynamic) that is the slowest iterator of m or of n: that
  /// axis ('m' or 'n'), and its elements per unit of the run-time size; M or N above is the
  /// range's largest. Kernels then read it from an argument. 0: every extent is a constant.
  std::int64_t per_size = 0;
  char dynamic_axis = 'm';
  int mapping_id = -1;
  /// A relayout view: operands A and B (index 0, 1) copied channels-last by a prologue kernel
  /// where `active`; the reduction iterator made innermost is k_iters.back().
  std::array<OperandRelayout, 2> relayout{};
  /// The ScheduleParams::relayout value of a relayout view (relayout_vector_bytes()); 0 otherwise.
  int relayout_knob = 0;
  std::shared_ptr<const Compute> view_owner;
  bool relayouted() const { return view_owner != nullptr; }
  bool dynamic() const { return per_size > 0; }
  /// The virtual GEMM's extent along the dynamic axis (M or N), and its tile along it.
  std::int64_t dynamic_extent() const { return dynamic_axis == 'm' ? M : N; }

  /// The GEMM-equivalent work, 2 * M * N * K * batch * serial (padding excluded).
  double flops() const { return 2.0 * M * N * K * batch * serial; }
};

/// Why kernels of `g` cannot take its compute's dynamic extent at run time ("" when they can, or
/// when every extent is fixed): the iterator must be the slowest of the virtual M or N.
std::string dynamic_gemm_error(const ImplicitGemm& g);

/// A range's GEMM as its kernels run at `size` (a size in Compute::dynamic's range): M or N along
/// the dynamic axis is size x per_size. `g` itself when every extent is fixed.
ImplicitGemm gemm_at_size(const ImplicitGemm& g, std::int64_t size);

/// Builds the virtual GEMM of one mapping of one match.
ImplicitGemm make_implicit_gemm(const Compute& c, const HwAbstraction& hw, const Match& match, const Mapping& mapping);

/// The vector width, in bytes, that a relayout view of ScheduleParams::relayout `knob` (1 or 2)
/// pads its channels to and is offered for.
constexpr int relayout_vector_bytes(int knob) { return knob == 2 ? 8 : 16; }

/// The relayout view of `g` for ScheduleParams::relayout `knob` (1 or 2): a reduction iterator `c`
/// that indexes one dimension of both operands alone (a convolution's input channels) is made the
/// innermost of k, and each operand whose dimension of `c` is not its last is read from a copy
/// with that dimension moved last (NCHW -> NHWC, KCRS -> KRSC, NCW -> NWC, NCDHW -> NDHWC). Where
/// `c`'s extent is not a whole number of the knob's vectors (relayout_vector_bytes(); a first
/// layer's C = 3), both operands are copied with `c` padded with zeros to the next one (NHWC and
/// KRSC too), and `c` in the view has the padded extent. Offered where an operand cannot be read
/// in aligned vectors of that width in place along k nor along m / n (a 3x3 or strided
/// convolution's NCHW input) but can in the view, along the axis this mapping's layout stores it,
/// and no operand loses; knob 2 only where it pads fewer channels than knob 1 (C = 3 -> 4, not 8:
/// half the bytes and multiplies of a first layer). `why_not` says why not, else `gemm` is the view.
struct RelayoutView {
  std::string why_not;
  ImplicitGemm gemm;
};
RelayoutView relayout_view(const ImplicitGemm& g, int knob = 1);

}  // namespace tmap
