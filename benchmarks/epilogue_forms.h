// tmap_bench's view of a fused epilogue (ir/epilogue.h): how its operands lie against the output
// in memory, the bias-activation form that cuDNN's and cuBLASLt's fused calls compute, and the
// kernels of the unfused sequence that a framework without fusion runs after the contraction.
// Needs no GPU (tested on the CPU).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tmap/ir/compute.h"

namespace bench {

using tmap::Compute;

/// An epilogue operand as the output's memory sees it.
struct OperandView {
  int tensor = -1;
  /// Per output dimension (tmap's layout, outermost first): the operand's element stride along
  /// it, 0 where it is broadcast.
  std::vector<std::int64_t> stride;
  std::int64_t base = 0;  ///< Its element at the output's first element.
  bool full = false;      ///< Varies along every output dimension of extent > 1.
};

struct EpilogueView {
  std::vector<std::int64_t> out_shape;
  std::vector<OperandView> operands;
  /// Whether operand i varies only along `dim`, contiguously, from its first element.
  bool only_along(int i, int dim) const;
  /// Whether operand i is stored exactly as the output is.
  bool like_output(int i) const;
};

/// The view of `c`'s epilogue, or nothing (with `why`) when an output dimension is not indexed
/// by one iterator.
std::optional<EpilogueView> epilogue_view(const Compute& c, std::string& why);

/// The epilogue's program as a tree: node i's arguments, and whether its value depends on the
/// contraction's ("chain" nodes).
struct EpiTree {
  std::vector<tmap::EpiNode> nodes;
  std::vector<std::vector<int>> args;
  std::vector<bool> chain;
  int root = -1;
};
EpiTree epilogue_tree(const tmap::Epilogue& e);

/// act(alpha * Out * scale + bias + residual): what cudnnConvolutionBiasActivationForward (the
/// per-channel scale folded into the filter) and cuBLASLt's bias epilogues compute.
struct BiasActForm {
  tmap::EpiOp act = tmap::EpiOp::kAcc;  ///< kAcc: none.
  double alpha = 1;
  int scale = -1, bias = -1, residual = -1;  ///< Operand indices; -1: none.
};
/// The epilogue in that form, when it is one; a bias and a scale vary along `channel_dim` only.
std::optional<BiasActForm> bias_act_form(const Compute& c, const EpilogueView& v, int channel_dim);

/// The unfused sequence's kernels (pass0, pass1, ...; each `pass<i>(y, in0..in3, e0..)` over
/// the output's elements): one per operation of the epilogue (a multiply by a broadcast operand
/// followed by the add of one, a folded BatchNorm, is one), each reading its inputs from and
/// writing its result to memory in the output's dtype, as a framework runs them. `inputs[i]`
/// says where pass i's in<k> come from: -1 the contraction's output, else an earlier pass.
std::string unfused_source(const Compute& c, const EpilogueView& v, std::vector<std::vector<int>>& inputs);

}  // namespace bench
