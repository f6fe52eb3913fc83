// The virtual GEMM a mapping defines, the input of every emitter.
//
// M is the product of the extents of the iterators fused into axis i, N into j, K into k (an
// unmapped axis has extent 1). Iterators that index the output but are not mapped are batch
// dimensions of the grid; reductions that are not mapped are serial loops around the K loop.
// Each operand element is found from its virtual coordinates through the mapping and the
// compute's affine indices, so no data transform runs outside the kernel.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tmap/hw/hw_abstraction.h"
#include "tmap/ir/compute.h"
#include "tmap/match/match_report.h"

namespace tmap {

struct ImplicitGemm {
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
  int mapping_id = -1;

  /// The GEMM-equivalent work, 2 * M * N * K * batch * serial (padding excluded).
  double flops() const { return 2.0 * M * N * K * batch * serial; }
};

/// Builds the virtual GEMM of one mapping of one match.
ImplicitGemm make_implicit_gemm(const Compute& c, const HwAbstraction& hw, const Match& match, const Mapping& mapping);

}  // namespace tmap
