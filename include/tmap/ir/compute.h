// The tensor IR: one reduction statement over named iterators, with concrete sizes.
//
//   Out[idx...] += X[idx...] * Y[idx...]
//
// Every index is an AffineExpr of the iterators. Semantics: for every point of the iteration
// space (the product of all iterator extents), Out at the output index is updated with the
// product of the inputs at their indices. An input read outside its bounds yields zero: this is
// how padding is expressed. The output is never indexed outside its bounds, and every output
// element is written (checked when the compute is built, see frontend/compute_loader.h).
// With `+=` the output starts from zero; its dtype is the accumulation type.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/ir/dtype.h"
#include "tmap/ir/epilogue.h"
#include "tmap/ir/expr.h"

namespace tmap {

enum class IterKind { kSpatial, kReduction };
enum class UpdateKind { kAccumulate /* += */, kAssign /* = */ };

struct Iterator {
  std::string name;
  std::int64_t extent = 0;
  IterKind kind = IterKind::kSpatial;  ///< Spatial iff it indexes the output.
  bool operator==(const Iterator&) const = default;
};

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype = DType::kFloat32;
  std::int64_t num_elements() const;
  /// Elements between neighbours along dimension `d` (dense, row-major).
  std::int64_t stride(std::size_t d) const;
  bool operator==(const Tensor&) const = default;
};

struct Access {
  int tensor = -1;                   ///< Index into Compute::tensors.
  std::vector<AffineExpr> indices;   ///< One per tensor dimension.
  /// Whether iterator `iter` appears in any index of this access.
  bool uses(int iter) const;
  bool operator==(const Access&) const = default;
};

/// Elementwise work applied to the contraction's value before it is stored (ir/epilogue.h).
struct Epilogue {
  /// The name the text gives the contraction's value ("Out"); empty when there is no epilogue.
  std::string acc;
  std::vector<Access> operands;  ///< In order of first appearance; indexed by spatial iterators.
  std::vector<EpiNode> program;  ///< Postfix; leaves one value.

  bool empty() const { return program.empty(); }
  bool operator==(const Epilogue&) const = default;
};

/// An extent given as a range of sizes (`--set M=1..256`): generated kernels take it at run time.
/// The compute holds the range's largest size. The iterator is spatial and indexes, alone, only
/// dimension 0 of each tensor it reaches, whose size is its extent (dynamic_extent_error): strides
/// do not depend on it, and the compute at any size in [lo, hi] is compute_at(c, size).
struct DynamicExtent {
  int iter = -1;      ///< The iterator whose extent varies; -1: every extent is fixed.
  std::string param;  ///< The parameter given as a range, for messages and logs.
  std::int64_t lo = 0, hi = 0;
  /// A sample of the range (range_sample()): kernels of the whole range, measured and modelled
  /// at this size; 0: the range itself.
  std::int64_t at = 0;
  bool active() const { return iter >= 0; }
  bool operator==(const DynamicExtent&) const = default;
};

struct Compute {
  /// The most tensors (output and inputs) a statement takes: a kernel passes each as a pointer.
  static constexpr int kMaxTensors = 16;

  std::string name;
  std::vector<std::pair<std::string, std::int64_t>> params;  ///< In declaration order.
  std::vector<Tensor> tensors;
  std::vector<Iterator> iters;  ///< Spatial iterators first, each group in order of appearance.
  UpdateKind update = UpdateKind::kAccumulate;
  /// The dtype products are summed in: the output's, or wider (float32 sums stored as float16
  /// or bfloat16, converted once at the end).
  DType accumulate = DType::kFloat32;
  Access output;
  std::vector<Access> inputs;   ///< The factors of the product, left to right.
  /// With an epilogue, `output` is its result (indexed as the contraction's value, which is not
  /// stored) and the operands' tensors follow the statement's in `tensors`.
  Epilogue epilogue;
  DynamicExtent dynamic;  ///< Inactive for a compute of one shape.
  /// Groups of the user's compute that one group of this one packs (pack_groups()); 1 for a
  /// compute as written. Not part of the workload: a record names the user's compute.
  int group_pack = 1;

  const Tensor& tensor_of(const Access& a) const { return tensors.at(a.tensor); }
  std::vector<std::string> iterator_names() const;
  int find_iterator(const std::string& name) const;  ///< -1 when absent.
  /// The iterators of `its` whose extent is above 1, in their order (one of extent 1 indexes
  /// nothing: a convolution's group iterator when groups is 1).
  std::vector<int> live_iterators(const std::vector<int>& its) const;
  /// The smallest and largest value of index `e` as its iterators range over their extents.
  std::pair<std::int64_t, std::int64_t> index_range(const AffineExpr& e) const;
  /// Multiply-adds in the iteration space (product of all extents).
  std::int64_t iteration_points() const;
  /// The statement with concrete indices, e.g. "Out[n, k, p, q] += I[n, c, p + r - 1, q + s - 1] * W[k, c, r, s]".
  std::string statement_text() const;
  /// The epilogue as text, e.g. "Y[n, k] = relu(Out[n, k] + bias[k])"; empty without one.
  std::string epilogue_text() const;
};

/// Why iterator `iter` of `c` cannot vary at run time (DynamicExtent's rules), or "".
std::string dynamic_extent_error(const Compute& c, int iter);
/// The compute of one shape at `size` of `c`'s dynamic extent (within [lo, hi]): the iterator's
/// extent and the dimensions it indexes set to `size`, the range dropped.
Compute compute_at(const Compute& c, std::int64_t size);
/// Range `c` as tuned at one of its sizes (DynamicExtent::at): the same kernels as the range's,
/// measured at `size` and ranked by the cost model at that size, under a workload of its own.
Compute range_sample(const Compute& c, std::int64_t size);
/// `c`'s contraction alone: the epilogue and its operands' tensors dropped, the output named as
/// the epilogue names the contraction's value (so that a built-in op with an epilogue gives the
/// op's own workload). `c` itself where it has no epilogue.
Compute contraction_of(const Compute& c);

/// A plain JSON description: name, statement, params, tensors (name, shape, dtype), iterators
/// (name, extent, kind), the accesses with their affine indices (enough to rebuild it), and a
/// dynamic extent's iterator, parameter and range.
nlohmann::json to_json(const Compute& c);

/// The workload key of a log record: 16 hex digits of a 64-bit FNV-1a hash of what decides the
/// computation (the statement, the tensors, the iterators' names and extents, the accumulation
/// dtype), not of its labels (name, parameters).
std::string workload_key(const Compute& c);

/// Rebuilds a compute from to_json()'s document (logs, the measurement worker). Malformed
/// documents are user errors that name `what`.
Compute compute_from_json(const nlohmann::json& j, const std::string& what);

}  // namespace tmap
