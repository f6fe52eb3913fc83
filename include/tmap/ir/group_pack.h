// Group packing: a grouped contraction (a grouped convolution) with few channels a group seen as
// one with fewer, wider groups whose filters are block-diagonal.
//
// A grouped convolution's group iterator g indexes the output and both inputs: the image with a
// reduction iterator beside it (g*Cg + c), the filters and the output with a spatial one
// (g*Kg + k). Each group is its own small GEMM (N = Kg, K = R*S*Cg), far below an instruction's
// tile where groups hold 4 or 8 channels. Packing P groups splits g into go * P + gi and adds a
// reduction iterator gj over the same P groups:
//
//   Out[.., go*P*Kg + gi*Kg + k] += I[.., go*P*Cg + gj*Cg + c] * Wt[go*P*Kg + gi*Kg + k, gj - gi, ..]
//
// The filters gain a dimension of size 1 indexed by gj - gi, which reads zero off the diagonal
// (an input read outside its bounds is zero), so the sum is the grouped one. Each packed group is
// a GEMM of N = P*Kg and K = R*S*P*Cg whose image rows are P*Cg contiguous channels: P times the
// tensor work, traded for whole instruction tiles and wide vector loads. The filters keep their
// memory; only their declared shape gains the dimension.
#pragma once

#include <string>
#include <vector>

#include "tmap/ir/compute.h"

namespace tmap {

struct GroupPack {
  std::string why_not;  ///< Empty when `compute` is the packed compute.
  Compute compute;
};

/// `c` with `pack` (>= 2, dividing the groups) groups packed into one.
GroupPack pack_groups(const Compute& c, int pack);

/// The packs offered for `c`: powers of two from 2 up to 32 that divide its groups and keep a
/// packed group's channels, in and out, at most 64 (none where `c` has no group iterator).
std::vector<int> group_packs(const Compute& c);

}  // namespace tmap
