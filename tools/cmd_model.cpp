// `tmap import`: the tensor contractions of an ONNX model as a workload table.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "tmap/frontend/onnx_import.h"
#include "tmap/support/files.h"

namespace tmap::cli {
namespace {

struct ImportArgs {
  std::string model, format = "text", out, layout = "nchw", dtype, out_dtype = "float16";
  std::int64_t batch = 0;
  std::vector<std::string> dims;
  bool no_fuse = false;
};

/// A workload table as text: one line per workload (count, GFLOP, share), then what was left out.
void print_table(const WorkloadTable& t) {
  int nodes = 0;
  for (const auto& w : t.workloads) nodes += w.count;
  std::printf("%s: %d contraction node(s) -> %zu unique workload(s), %.3f GFLOP per inference (inputs %s, outputs %s)\n",
              t.title.c_str(), nodes, t.workloads.size(), t.total_flops() / 1e9,
              t.dtype.empty() ? "float16" : t.dtype.c_str(), t.out_dtype.c_str());
  std::printf("%-3s %-28s %-17s %5s %10s %7s  %s\n", "#", "name", "op", "count", "GFLOP", "share", "parameters");
  int i = 0;
  int absorbed = 0;
  for (const auto& w : t.workloads) {
    std::printf("%-3d %-28s %-17s %5d %10.4f %6.1f%%  %s%s\n", i++, w.name.c_str(), w.op.c_str(), w.count, w.flops / 1e9,
                100 * t.share(w), params_text(w).c_str(), w.notes.empty() ? "" : ("  [" + w.notes.front() + (w.notes.size() > 1 ? ", ..." : "") + "]").c_str());
    if (!w.epilogue.empty())
      std::printf("    fused: %s  (absorbs %zu node(s))\n", w.epilogue.c_str(), w.absorbed.size());
    absorbed += static_cast<int>(w.absorbed.size());
  }
  if (absorbed > 0) std::printf("%d node(s) computed in the workloads' epilogues\n", absorbed);
  if (!t.unsupported.empty()) {
    std::printf("unsupported (%zu), not in the table:\n", t.unsupported.size());
    for (const auto& u : t.unsupported) std::printf("  %s (%s): %s\n", u.node.c_str(), u.op_type.c_str(), u.reason.c_str());
  }
  if (!t.other_ops.empty()) {
    std::string line;
    for (const auto& [op, n] : t.other_ops) line += (line.empty() ? "" : ", ") + op + " " + std::to_string(n);
    std::printf("other nodes (outside any kernel from tmap): %s\n", line.c_str());
  }
}

}  // namespace

std::map<std::string, std::int64_t> parse_dims(const std::vector<std::string>& args) {
  std::map<std::string, std::int64_t> out;
  for (const ParamOverride& p : parse_param_overrides(args)) {
    if (p.value < 1) bad("--dim " + p.name, "a dimension must be positive, not " + std::to_string(p.value), "give --dim NAME=VALUE with VALUE >= 1");
    if (p.range) bad("--dim " + p.name, "an imported model takes one size per dimension", "give --dim NAME=VALUE");
    out[p.name] = p.value;
  }
  return out;
}

void register_model(CLI::App& app) {
  auto args = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand("import", "List an ONNX model's convolutions and matrix products as a workload table");
  cmd->add_option("model", args->model, "The ONNX model (.onnx)")->required();
  cmd->add_option("--batch", args->batch, "The value of the inputs' symbolic batch (first) dimension")
      ->check(at_least(1));
  cmd->add_option("--dim", args->dims, "NAME=VALUE: the value of a symbolic input dimension (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--layout", args->layout, "2-D convolutions as nchw (the model's layout, default) or nhwc "
                                            "(conv2d_nhwc: channels-last tensors)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_option("--dtype", args->dtype, "The workloads' input dtype, e.g. bfloat16 (default float16)");
  cmd->add_option("--out-dtype", args->out_dtype, "The workloads' output dtype (default float16, sums in float32)");
  cmd->add_flag("--no-fuse", args->no_fuse,
                "Bare contractions: no bias, BatchNormalization, Add or activation fused into their epilogues");
  cmd->add_option("--format", args->format, "text (a table) or json (the workload table that tune --table reads)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--out", args->out, "Write the JSON workload table to this file (and print the text table)");
  cmd->callback([args] {
    OnnxImportOptions o;
    o.batch = args->batch;
    o.dims = parse_dims(args->dims);
    o.channels_last = args->layout == "nhwc";
    o.dtype = args->dtype;
    o.out_dtype = args->out_dtype;
    o.fuse = !args->no_fuse;
    const WorkloadTable t = import_onnx(args->model, o);
    if (t.workloads.empty()) {
      std::string reasons;
      for (std::size_t i = 0; i < t.unsupported.size() && i < 3; ++i)
        reasons += (i ? "; " : "") + t.unsupported[i].node + ": " + t.unsupported[i].reason;
      bad(args->model, t.unsupported.empty() ? "the model has no Conv, Gemm or MatMul node"
                                             : std::to_string(t.unsupported.size()) + " contraction node(s), none that tmap maps",
          t.unsupported.empty() ? "tmap tunes convolutions and matrix products" : reasons);
    }
    if (!args->out.empty()) write_file(args->out, workload_table_json(t), "--out");
    if (args->format == "json") std::cout << workload_table_json(t);
    else print_table(t);
  });
}

}  // namespace tmap::cli
