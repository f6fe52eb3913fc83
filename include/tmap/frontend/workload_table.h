// Workload tables: the unique tensor contractions of a model (or any list of workloads), each a
// built-in op with its parameters, how often the model runs it and its share of the model's
// FLOPs. `tmap import` writes them from ONNX models; `tmap tune --table`, `tmap_bench --table`
// and `benchmarks/run.sh table` read them. The file is one JSON object:
//   {
//     "format": "tmap-workloads/1",
//     "title": "resnet50.onnx (batch 1)",              (optional)
//     "source": "models/resnet50.onnx",                 (optional: the model it came from)
//     "batch": 1,                                        (optional)
//     "dtype": "bfloat16",                               (optional: the inputs', default float16)
//     "out_dtype": "float16",                            (optional: outputs of float32 sums)
//     "workloads": [
//       {"name": "conv1", "op": "conv2d", "params": {"N": 1, "C": 3, ...}, "count": 1,
//        (a parameter may be a range of sizes, "N": "1..64", which kernels take at run time: at
//        most one a workload; "sizes": [1, 8, 64] then names the sizes to sample and compare)
//        "epilogue": "Y[n, k, p, q] = relu(Out[n, k, p, q] + bias[k])",    (optional, see ir/epilogue.h)
//        "nodes": ["conv1"], "absorbed": ["relu1"], "notes": ["..."]},       (nodes, absorbed, notes optional)
//       ...],
//     "unsupported": [{"node": "up1", "op_type": "ConvTranspose", "reason": "..."}],   (optional)
//     "other_ops": {"Relu": 49, "Add": 16}                                             (optional)
//   }
// FLOPs and shares are derived from the ops when read, never trusted from the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tmap/ir/compute.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

struct TableWorkload {
  std::string name;
  std::string op;                                           ///< A built-in op (tmap ops list).
  std::vector<std::pair<std::string, std::int64_t>> params; ///< Overrides of the op's parameters.
  int count = 1;                                            ///< Runs per model inference.
  std::string epilogue;                                     ///< Fused after the op ("": none).
  std::vector<std::string> nodes;                           ///< The model's nodes it stands for.
  std::vector<std::string> absorbed;                        ///< The nodes its epilogue computes.
  std::vector<std::string> notes;                           ///< What the kernel leaves to others.
  double flops = 0;                                         ///< Of one run (2 per multiply-add; a range's largest size).
  /// A range of sizes: the parameter (its value in `params` is the largest size) and the smallest.
  std::string range_param;
  std::int64_t range_lo = 0;
  std::vector<std::int64_t> sizes;  ///< A range's sizes to sample and compare (ascending; empty: the tuner's own).

  bool ranged() const { return !range_param.empty(); }
  /// A range's largest size (0: no range).
  std::int64_t range_hi() const {
    for (const auto& [name, value] : params)
      if (name == range_param) return value;
    return 0;
  }
};

struct UnsupportedNode {
  std::string node, op_type, reason;
};

struct WorkloadTable {
  std::string title, source;
  std::int64_t batch = 0;  ///< 0: not given.
  std::string dtype;        ///< The inputs' ("": the ops' own, float16).
  std::string out_dtype = "float16";
  std::vector<TableWorkload> workloads;
  std::vector<UnsupportedNode> unsupported;
  std::map<std::string, int> other_ops;  ///< Nodes that are no contraction (no kernel needed), by type.

  /// FLOPs of one inference over the table's workloads: sum of count x flops.
  double total_flops() const;
  /// One workload's share of total_flops().
  double share(const TableWorkload& w) const;
};

/// The built-in op of `w` with its parameters, the table's input and output dtypes ("": the
/// op's own) and its epilogue; a UserError naming the workload when its op, parameters,
/// dtypes or epilogue are invalid.
Compute build_table_workload(const TableWorkload& w, const std::string& in_dtype, const std::string& out_dtype,
                             const std::string& where);

/// A workload of one shape per size of `sizes` for a range workload, named NAME_<param in lower
/// case><size>, e.g. qkv_m16; a workload of one shape as it is.
std::vector<TableWorkload> workloads_at_sizes(const TableWorkload& w, const std::vector<std::int64_t>& sizes);

/// Fills in each workload's flops from its op.
void compute_table_flops(WorkloadTable& t);

/// The table as the JSON document described above (two-space indented).
std::string workload_table_json(const WorkloadTable& t);

/// Reads and validates a table file; errors point at the file, line and column.
WorkloadTable load_workload_table(const std::string& path);
/// The same for a table's text (`source.file()` names it in errors).
WorkloadTable parse_workload_table(const SourceText& source);

/// "C=64 H=56 W=56 K=64 ..." for tables and progress lines.
std::string params_text(const TableWorkload& w);

}  // namespace tmap
