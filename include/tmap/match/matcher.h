// Matching a compute against a hardware abstraction, in three stages. Each returns data: on
// failure a MatchFailure whose every value has a message, and a detail naming what differed.
//
//  1. DAG match:        the compute is a multiply-accumulate of two inputs into one output,
//                       as the abstraction's DAG (two loads -> compute -> store) is.
//  2. Expression match: which compute input plays operand A and which plays B, with dtypes
//                       compatible (inputs feed the operands; the output is the accumulator).
//  3. Index match:      which software iterators can play each intrinsic axis, classified by
//                       the set of tensors they index (as MLIR's inferContractionDims does):
//                       i: in A and D, not B; j: in B and D, not A; k: in A and B, not D.
//                       Iterators in all three are batch loops; the rest are outer loops.
//
// Operand roles: the written order (first input as A) is tried first, then the swapped one. The
// swapped order computes the transposed product D^T = B^T A^T: it is also reported (after the
// written order's matches) when both orders feed the operands and the abstraction's shapes are
// not symmetric (no n x m for some m x n, as m16n8k16 or wgmma's m64nN), so that a skinny
// dimension can land on the intrinsic's short side.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tmap/hw/hw_abstraction.h"
#include "tmap/ir/compute.h"

namespace tmap {

enum class MatchFailure {
  kNone,
  kNotAccumulation,         ///< DAG: the statement assigns ('='), the intrinsic accumulates.
  kInputCountMismatch,      ///< DAG: not a product of exactly two inputs.
  kInputDTypeMismatch,      ///< Expression: an input's dtype cannot feed its operand.
  kAccumulatorDTypeMismatch,///< Expression: the output's dtype is not the accumulator's.
  kNoMappableIterator,      ///< Index: no iterator can play any intrinsic axis.
};
/// A one-line explanation of the failure kind.
std::string_view message(MatchFailure f);
/// The stage a failure belongs to: "dag", "expression" or "index".
std::string_view stage(MatchFailure f);

struct DagMatch {
  MatchFailure failure = MatchFailure::kNone;
  std::string detail;
  bool ok() const { return failure == MatchFailure::kNone; }
};
DagMatch match_dag(const Compute& c, const HwAbstraction& hw);

struct ExprMatch {
  MatchFailure failure = MatchFailure::kNone;
  std::string detail;
  int a_input = -1;  ///< Index into Compute::inputs of the input that plays operand A.
  int b_input = -1;
  bool ok() const { return failure == MatchFailure::kNone; }
};
ExprMatch match_expression(const Compute& c, const HwAbstraction& hw);
/// The other operand order of a successful match (A and B exchanged) when it feeds the operands
/// too, else a failed ExprMatch saying why.
ExprMatch swapped_roles(const Compute& c, const HwAbstraction& hw, const ExprMatch& roles);
/// Whether every shape m x n x k of the abstraction has its transposed n x m x k beside it, so
/// that the swapped operand order adds no intrinsic the written order lacks.
bool shapes_symmetric(const HwAbstraction& hw);

struct IndexMatch {
  MatchFailure failure = MatchFailure::kNone;
  std::string detail;
  std::array<std::vector<int>, 3> candidates;  ///< Iterator ids per axis i, j, k.
  std::vector<int> batch;                      ///< In A, B and D.
  std::vector<int> outer;                      ///< Any other iterator: stays a serial loop.
  bool ok() const { return failure == MatchFailure::kNone; }
};
IndexMatch match_indices(const Compute& c, const ExprMatch& roles);

/// A full "why not" sentence for a failed stage: message plus detail.
std::string reason_text(MatchFailure f, const std::string& detail);

}  // namespace tmap
