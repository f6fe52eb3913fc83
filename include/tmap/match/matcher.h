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
// The operand order: both orders are tried, the written one (first input as A) first. When
// the written order matches, the swapped order is not reported: it computes the transposed
// product D^T = B^T A^T, which the abstraction's shapes (m <-> n) and layouts already cover.
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
