// How contiguous each operand of a virtual GEMM is along the axis its shared tile's rows run
// on: the widest vectors it can be loaded in, and whether they need a shift or a stride. Facts
// of the compute and the mapping alone; the schedule's choice of vectors builds on them
// (schedule.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tmap/gemm/implicit_gemm.h"

namespace tmap {

/// How far consecutive values of a virtual axis stay together in an operand's tensor.
///
/// Fused: the axis's innermost iterators index the tensor's innermost dimensions one each, alone,
/// with coefficient 1 and no offset, every dimension but the outermost of the run as large as its
/// iterator (so (c, r, s) of KCRS weights, or (p, q) of an NCHW 1x1 input, run on contiguously).
/// A group of `width` such values starting at a multiple of `width` is then contiguous, aligned
/// and wholly inside the tensor: one vector of `width` elements.
///
/// Shifted: the innermost iterator indexes the last dimension with coefficient 1 but beside other
/// terms and a constant, as q*1 + s - pad of an NCHW input. A group is still contiguous, but
/// starts at an offset that the other iterators move (and may straddle the padding): it is loaded
/// as the two aligned vectors that cover it, zero where they lie outside the dimension, and
/// shifted into place in registers. Those terms' coefficients and the constant, when all are
/// multiples of a power of two, leave groups that wide aligned: `aligned` is the widest group
/// loadable without the shift (and with cp.async).
///
/// Strided: the innermost iterator indexes the last dimension with coefficient 2, as 2*q + s - pad
/// of a stride-2 convolution's input. A group of `width` values spans 2 * width - 1 elements: it
/// is loaded as the two aligned vectors of `load` elements that cover it (`load` divides the
/// dimension, so each lies wholly inside or outside it), and every other element is picked out in
/// registers. Never aligned (`aligned` is 1); `width` is at most half of `load`, and at least
/// 4 bytes or 1.
struct Contiguity {
  int width = 1;    ///< Elements per vector, at most 16 bytes.
  int aligned = 1;  ///< The widest vector (<= width) that needs no shift.
  int step = 1;     ///< Elements between a vector's consecutive values in memory (2: strided).
  int load = 0;     ///< Strided: elements per aligned vector read (0 otherwise).
};
/// Vectors of at most `max_bytes` (a power of two): 16 for loads; a 128-byte line for prefetches.
Contiguity contiguity(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits, int max_bytes = 16);

/// The contiguity of operand `which` (0 = A, 1 = B) along its shared tile's rows (k for
/// row-major A, m for column-major A, n for row-major B, k for column-major B); sub-byte operands
/// are gathered in packed pairs, never in vectors.
Contiguity operand_contiguity(const ImplicitGemm& g, int which);
/// operand_contiguity(g, which).width: the widest vector (elements) the operand can be loaded in.
int max_vector_width(const ImplicitGemm& g, int which);
/// The widest group (elements, up to `max_bytes` of `bits`-bit elements) of consecutive values of
/// virtual axis `axis` that is contiguous and aligned in `acc`'s tensor without a shift (the
/// output's vectors: contiguity(...).aligned).
int contiguous_width(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits, int max_bytes = 16);

/// How far `acc`'s element moves in its tensor for each step of the flat coordinate of `axis`
/// (its iterators in mixed radix, the last fastest), where that is the same whatever the digits:
/// each iterator's stride is the next one's times the next one's extent, as (n, p, q) of an NHWC
/// output, whose offset is then pixel * K, no division needed. 0 where the access uses none of
/// them; std::nullopt where the steps are uneven (a padded, strided or transposed index).
std::optional<std::int64_t> flat_stride(const Compute& c, const Access& acc, const std::vector<int>& axis);

/// Whether the rows of operand `which`'s shared tile run along m (A) or n (B) rather than along
/// k: A stored [BK][BM] (layout "t.."), B stored [BK][BN] (layout ".n."). Such an operand is read
/// transposed by ldmatrix.trans and wgmma's transpose bit.
bool stored_along_mn(const ImplicitGemm& g, int which);

}  // namespace tmap
