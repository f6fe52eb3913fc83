// tmap_bench: tmap's tuned kernels against cuDNN and cuBLAS, measured the same way in the same
// process, on the same random inputs.
//
// For each workload of a table (ResNet-18 conv2d layers at one batch and layout, the GEMM table,
// or a workload table from `tmap import`), it replays tmap's best record from a log (regenerated,
// compiled, run), then runs the baselines (cudnn_baselines.h, cublas_baselines.h): for
// convolutions every cuDNN forward algorithm and cuDNN 9's engines, for GEMMs cublasLt's
// heuristic candidates and plain cublasGemmEx, the fastest correct one kept. A workload with a
// fused epilogue is timed against cuDNN's and cuBLASLt's fused calls and against the unfused
// sequence (the bare contraction, then one elementwise kernel per operation; fused.h).
// Everything is timed by time_launches() (CUDA-graph replay of repeated runs, median of
// repeats), and again with the L2 flushed before each run (cold). Every output is compared with
// the reference kernel tmap generates from the IR, and the baselines' with tmap's own output.
// Writes a CSV and a Markdown table with the geometric-mean speedup.
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "cublas_baselines.h"
#include "cudnn_baselines.h"
#include "unfused.h"
#include "tmap/frontend/op_library.h"
#include "tmap/frontend/workload_table.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/range_tuner.h"
#include "tmap/tune/tuner.h"

namespace {

using namespace bench;

bool is_conv_op(const std::string& op) { return op.rfind("conv", 0) == 0 || op == "depthwise_conv2d"; }

/// The compute of built-in `op` with `sets`, its inputs of `in_dtype` (empty: the op's float16)
/// and its output stored as `out_dtype`.
Compute build_workload(const std::string& op, const std::vector<std::string>& sets, const std::string& in_dtype,
                       const std::string& out_dtype) {
  tmap::ComputeDef def = tmap::builtin_op(op);
  tmap::set_dtypes(def, in_dtype, out_dtype, "--dtype", "--out-dtype");
  return tmap::build_compute(def, tmap::parse_param_overrides(sets));
}

/// The output dtype a table is measured in unless --out-dtype says: the inputs' own for 16-bit
/// floats (float16 when not given), as cuDNN and cuBLAS users run them; else the definition's
/// (empty), the sums' type: float32 for float32 inputs, int32 for int8.
std::string default_out_dtype(const std::string& in_dtype) {
  if (in_dtype.empty()) return "float16";
  const auto t = tmap::parse_dtype(in_dtype);
  return t == tmap::DType::kFloat16 || t == tmap::DType::kBFloat16 ? std::string(tmap::dtype_name(*t)) : "";
}

/// "float16 output", or "bfloat16 inputs, bfloat16 output" where the inputs are not float16.
std::string dtypes_text(const Compute* c) {
  if (!c) return "";
  const tmap::DType in = c->tensor_of(c->inputs[0]).dtype;
  const std::string out = std::string(tmap::dtype_name(c->tensor_of(c->output).dtype)) + " output";
  return in == tmap::DType::kFloat16 ? out : std::string(tmap::dtype_name(in)) + " inputs, " + out;
}

/// The dense Tensor Core peak of an H100 SXM in TFLOP/s (TOP/s for int8) for inputs of `dtype`:
/// float32 runs as tf32 at half the float16 rate, 8-bit inputs at twice it.
double h100_peak_tflops(tmap::DType dtype) {
  const double fp16 = 989.4;
  return dtype == tmap::DType::kFloat32 ? fp16 / 2 : tmap::dtype_bits(dtype) == 8 ? fp16 * 2 : fp16;
}

/// Where a replayed schedule was tuned, when not for the workload itself.
enum class Transfer { kNone, kOtherDtype, kWithoutEpilogue };

std::string transfer_note(Transfer t) {
  return t == Transfer::kOtherDtype        ? "schedule tuned for another output dtype"
         : t == Transfer::kWithoutEpilogue ? "schedule tuned without the epilogue"
                                           : "";
}

/// The record whose kernel the benchmark replays for `c`: the fastest measured among the best of
/// its own workload and the best of the same computation stored in another output dtype (the
/// schedule carries over; only the final conversion differs). A short tuning run of one dtype so
/// cannot hide a better schedule of the other. When there is none and `c` has an epilogue, the
/// record of `bare` (the contraction without it). `transfer` says which was found.
const tmap::TuneRecord* find_record(const std::vector<const tmap::TuneRecord*>& best, const Compute& c,
                                    const Compute* bare, Transfer& transfer) {
  const std::string key = tmap::make_workload(c).key;
  const tmap::TuneRecord* chosen = nullptr;
  bool transferred = false;
  for (const auto* r : best) {
    bool other_dtype = false;
    if (r->workload.key != key) {
      Compute other = tmap::compute_from_json(r->workload.compute, "log record");
      if (other.tensors.size() != c.tensors.size()) continue;
      other.tensors[other.output.tensor].dtype = c.tensor_of(c.output).dtype;
      other.accumulate = c.accumulate;
      if (tmap::make_workload(other).key != key) continue;
      other_dtype = true;
    }
    if (!chosen || r->result.median_us < chosen->result.median_us) {
      chosen = r;
      transferred = other_dtype;
    }
  }
  transfer = transferred ? Transfer::kOtherDtype : Transfer::kNone;
  if (chosen || !bare) return chosen;
  Transfer bare_transfer;
  chosen = find_record(best, *bare, nullptr, bare_transfer);
  if (chosen) transfer = Transfer::kWithoutEpilogue;
  return chosen;
}

/// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written) of a 256 MiB
/// cudaMemcpy: the best of 10 timed with events after 3 warm-ups. The ceiling of memory-bound kernels.
double copy_bandwidth_gbs() {
  const std::size_t bytes = std::size_t{256} << 20;
  Buffer a(bytes), b(bytes);
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "event");
  cuda_ok(cudaEventCreate(&stop), "event");
  float best_ms = 1e30f;
  for (int i = 0; i < 13; ++i) {
    cuda_ok(cudaEventRecord(start), "record");
    cuda_ok(cudaMemcpy(b.p, a.p, bytes, cudaMemcpyDeviceToDevice), "copy");
    cuda_ok(cudaEventRecord(stop), "record");
    cuda_ok(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (i >= 3) best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * bytes / (best_ms * 1e-3) / 1e9;
}

struct Row {
  int count = 1;  ///< Runs per inference (workload tables).
  std::string name, workload_key;
  double gflop = 0;
  double bytes = 0;  ///< Every tensor read or written once: the least traffic of any kernel.
  std::optional<Timing> tmap;
  double tmap_err = 0;
  std::optional<Baseline> baseline;
  std::optional<Baseline> other;  ///< Convolutions: cuDNN in the other layout.
  /// A workload with an epilogue: the bare contraction's strongest baseline followed by one
  /// elementwise kernel per operation. `baseline` is then the faster of it and the fused calls.
  std::optional<Baseline> unfused;
  /// A workload with an epilogue: tmap's schedule without it, and tmap's kernel again, timed warm
  /// in alternating rounds (medians): what the epilogue costs, A/B in the same run.
  std::optional<double> bare_us, fused_ab_us;
  std::string note;

  /// The epilogue's cost as a fraction of the bare kernel's time (0.04: 4% slower).
  std::optional<double> epilogue_cost() const {
    if (!bare_us || !fused_ab_us) return std::nullopt;
    return *fused_ab_us / *bare_us - 1;
  }

  /// The faster of the two layouts' baselines.
  const std::optional<Baseline>& fastest() const {
    return other && (!baseline || other->time.warm_us < baseline->time.warm_us) ? other : baseline;
  }
};

/// A text field of the CSV: its commas become semicolons, so that readers (make_results.sh's
/// awk among them) split rows on commas alone.
std::string csv_text(std::string s) {
  std::replace(s.begin(), s.end(), ',', ';');
  return s;
}

/// Today's date in UTC, as YYYY-MM-DD.
std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string fixed(double v, int digits = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// "+4.1%", or "-" for none.
std::string percent_text(std::optional<double> fraction) {
  if (!fraction) return "-";
  return (*fraction >= 0 ? "+" : "") + fixed(*fraction * 100, 1) + "%";
}

/// The epilogues' cost over the rows that measured it: the median, and the largest among the
/// rows whose bare kernel takes 10 us or more (shorter ones are dominated by launch and tail).
std::string epilogue_cost_summary(const std::vector<Row>& rows) {
  std::vector<double> costs;
  const Row* worst = nullptr;
  int long_rows = 0;
  for (const auto& r : rows) {
    if (!r.epilogue_cost()) continue;
    costs.push_back(*r.epilogue_cost());
    if (*r.bare_us < 10) continue;
    ++long_rows;
    if (!worst || *r.epilogue_cost() > *worst->epilogue_cost()) worst = &r;
  }
  if (costs.empty()) return "";
  std::string s = "\nEpilogue cost (tmap's kernel against its own schedule without the epilogue, warm, three "
                  "alternating rounds in this run): median " + percent_text(tmap::median_of(costs)) + " over " +
                  std::to_string(costs.size()) + " workloads";
  if (worst)
    s += "; over the " + std::to_string(long_rows) + " of 10 us or more, at most " +
         percent_text(worst->epilogue_cost()) + " (" + worst->name + ")";
  return s + ".\n";
}

/// What a row's baselines run: a convolution of `rank` spatial dimensions (tmap's kernel
/// channels-last with `nhwc`) or, with rank 0, a GEMM.
struct RowKind {
  int rank = 0;
  bool nhwc = false;
};

/// A record's schedule regenerated for compute `c` (same mapping and schedule, this output and
/// epilogue) and compiled.
struct CompiledRecord {
  tmap::Regenerated g;
  tmap::CompileResult bin;
  int a = 0, b = 0;  ///< The GEMM's operand tensors in `c`.
};

CompiledRecord compile_record(const tmap::TuneRecord& record, const Compute& c,
                              const std::vector<tmap::HwAbstraction>& hws, int cc, tmap::NvrtcCompiler& compiler) {
  tmap::TuneRecord adapted = record;
  adapted.workload = tmap::make_workload(c);
  CompiledRecord k{tmap::regenerate(adapted, hws, cc), {}};
  k.bin = compiler.compile(k.g.kernel.code, k.g.kernel.name);
  if (!k.bin.ok) throw std::runtime_error("regenerated kernel does not compile:\n" + k.bin.log);
  k.a = c.inputs[k.g.gemm().a_input].tensor;
  k.b = c.inputs[k.g.gemm().b_input].tensor;
  return k;
}

/// What `fused`'s epilogue costs on `record`'s schedule: the kernel with and without it (the bare
/// contraction `bare`, verified against its own reference), timed warm in three alternating
/// rounds, each side's median kept in `row`.
void measure_epilogue_cost(Row& row, const tmap::TuneRecord& record, const CompiledRecord& fused, tmap::Workspace& ws,
                           const Compute& bare, const std::vector<tmap::HwAbstraction>& hws, int cc,
                           int graph_runs, tmap::NvrtcCompiler& compiler) {
  tmap::Workspace bare_ws(bare, 2024);
  const std::vector<double> bare_ref = tmap::gpu_reference(bare_ws, compiler);
  const CompiledRecord k = compile_record(record, bare, hws, cc, compiler);
  std::vector<double> with, without;
  for (int round = 0; round < 3; ++round) {
    const tmap::KernelRun f = tmap::run_candidate(ws, {}, fused.a, fused.b, fused.g.kernel, fused.bin.cubin,
                                                  bench_timing(graph_runs, false));
    const tmap::KernelRun b = tmap::run_candidate(bare_ws, round ? std::vector<double>() : bare_ref, k.a, k.b,
                                                  k.g.kernel, k.bin.cubin, bench_timing(graph_runs, false));
    if (!f.ok || !b.ok) throw std::runtime_error("the epilogue's A/B failed: " + (f.ok ? b.error : f.error));
    if (b.rel_l2 > 1e-2) throw std::runtime_error("the schedule without the epilogue is WRONG");
    with.push_back(f.median_us);
    without.push_back(b.median_us);
  }
  row.fused_ab_us = tmap::median_of(with);
  row.bare_us = tmap::median_of(without);
}

/// The baselines of a workload with an epilogue, in tmap's layout: cuDNN's or cuBLASLt's fused
/// calls and the unfused sequence; the row's baseline is the fastest of them.
void fused_baselines(Row& row, const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                     const std::vector<double>& tmap_out, RowKind kind, int graph_runs,
                     tmap::NvrtcCompiler& compiler) {
  std::string why;
  const std::optional<EpilogueView> view = epilogue_view(c, why);
  if (!view) {
    row.note = "no baseline for this epilogue: " + why;
    return;
  }
  const UnfusedPasses passes(c, *view, ws, compiler);
  std::string note;
  std::optional<Baseline> fused;
  if (kind.rank) {
    const ConvShape shape = conv_shape(c, kind.rank, kind.nhwc);
    fused = cudnn_fused_baseline(c, ws, *view, ref, tmap_out, shape, graph_runs, note);
    row.unfused = cudnn_baseline(c, ws, ref, tmap_out, shape, kind.nhwc, graph_runs, &passes.post());
  } else {
    fused = cublaslt_fused_baseline(c, ws, *view, ref, tmap_out, graph_runs, note);
    row.unfused = cublas_baseline(c, ws, ref, tmap_out, graph_runs, &passes.post());
  }
  if (row.unfused) row.unfused->name += " + " + std::to_string(passes.count()) + " elementwise";
  row.baseline = faster(fused, row.unfused);
  if (!fused) row.note += (row.note.empty() ? "" : "; ") + (note.empty() ? "no fused call ran" : note);
}

/// The row's baselines: cuDNN (in both layouts) for convolutions, cuBLAS for GEMMs; for a
/// workload with an epilogue, fused_baselines().
void measure_row_baselines(Row& row, const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                           const std::vector<double>& tmap_out, RowKind kind, int graph_runs,
                           tmap::NvrtcCompiler& compiler) {
  if (!c.epilogue.empty()) {
    fused_baselines(row, c, ws, ref, tmap_out, kind, graph_runs, compiler);
  } else if (kind.rank) {
    const ConvShape shape = conv_shape(c, kind.rank, kind.nhwc);
    row.baseline = cudnn_baseline(c, ws, ref, tmap_out, shape, kind.nhwc, graph_runs);
    row.other = cudnn_baseline(c, ws, ref, tmap_out, shape, !kind.nhwc, graph_runs);
  } else {
    row.baseline = cublas_baseline(c, ws, ref, tmap_out, graph_runs);
  }
}

/// measure_row_baselines(), a library's refusal (a dtype it has no type for, say) noted in the row.
void measure_baselines(Row& row, const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                       const std::vector<double>& tmap_out, RowKind kind, int graph_runs,
                       tmap::NvrtcCompiler& compiler) {
  try {
    measure_row_baselines(row, c, ws, ref, tmap_out, kind, graph_runs, compiler);
  } catch (const std::runtime_error& e) {
    row.note += (row.note.empty() ? "" : "; ") + std::string(e.what());
  }
  if (!row.baseline) row.note += row.note.empty() ? "no correct baseline" : "; no correct baseline";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tmap_bench: tmap's tuned kernels against cuDNN and cuBLAS, measured the same way"};
  std::string table_path, log_path, layout = "nhwc", csv_path, md_path, only, in_dtype, out_dtype, commit;
  int batch = 1, graph_runs = 20;
  double peak_tflops = 0;
  app.add_option("--table", table_path,
                 "benchmarks/workloads/resnet18_conv2d.json, conv1d.json, conv3d.json or gemm.json")
      ->required();
  app.add_option("--batch", batch, "Batch of the convolution table (see its \"batches\")");
  app.add_option("--layout", layout,
                 "nchw (channels first: NCW, NCHW, NCDHW) or nhwc (channels last; conv2d only) for tmap's kernels "
                 "and the first baseline; cuDNN also runs in the other layout")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_option("--log", log_path, "Tuning log with tmap's records")->required();
  app.add_option("--csv", csv_path, "Write the results as CSV");
  app.add_option("--md", md_path, "Write the results as a Markdown table");
  app.add_option("--only", only, "Only the workload of this name");
  app.add_option("--dtype", in_dtype,
                 "Inputs' dtype of tmap and the baselines alike: float16 (default; a workload table's own), "
                 "bfloat16, float32 (tf32 Tensor Cores), int8 (cuDNN writes its sums as float32), float8_e4m3 and "
                 "float8_e5m2 (cuBLASLt, gemm_nt)");
  app.add_option("--out-dtype", out_dtype,
                 "Output dtype of tmap and the baselines alike (default float16 for float16 inputs, as cuDNN and "
                 "cuBLAS users run them; a wider one where the inputs' sums need it, e.g. int32 for int8)");
  app.add_option("--graph", graph_runs, "Runs per CUDA graph replay (default 20)");
  bool dispatch_first = false;
  app.add_flag("--dispatch", dispatch_first,
               "Replay each workload with the kernel that a tuned range of sizes (tmap tune --set M=LO..HI) "
               "dispatches to its size, even where the log has a record of the shape itself (without it, only "
               "where it has none, and for the sizes of a table's range workloads)");
  bool print_workloads = false;
  app.add_flag("--print-workloads", print_workloads,
               "Print each workload as 'name key op --set ...' (for run.sh) and exit; no GPU needed. The key is "
               "that of the log record the benchmark would replay, when there is one");
  app.add_option("--commit", commit, "The tmap commit being measured, for the table's header (run.sh passes git's)");
  app.add_option("--peak", peak_tflops,
                 "The GPU's dense Tensor Core peak for the inputs' dtype in TFLOP/s, for '% of peak' (default the "
                 "H100 SXM's: 989.4 for 16-bit inputs, half for tf32, twice for 8-bit)");
  CLI11_PARSE(app, argc, argv);
  const bool table_out_dtype_given = !out_dtype.empty();
  try {
    std::ifstream in(table_path);
    if (!in) {
      std::cerr << "tmap_bench: error: cannot read table '" << table_path << "'\n";
      return 2;
    }
    const nlohmann::json table = nlohmann::json::parse(in);
    // A workload table (tmap import): any mix of ops, each against cuDNN or cuBLAS by its kind,
    // with the model's weighted total (count x time) at the end.
    const bool workloads_table = table.contains("workloads");
    std::optional<tmap::WorkloadTable> model;
    if (workloads_table) model = tmap::load_workload_table(table_path);
    const bool conv = table.contains("layers");
    // Spatial dimensions of a convolution table, from its fields.
    int rank = 0;
    if (conv) {
      const auto& f = table.at("fields");
      auto has = [&](const char* key) { return std::find(f.begin(), f.end(), key) != f.end(); };
      rank = has("D") ? 3 : has("H") ? 2 : 1;
    }
    if (conv && rank != 2 && layout == "nhwc") {
      std::cerr << "tmap_bench: error: --layout nhwc: tmap has no channels-last conv" << rank
                << "d op; the table compares tmap's channels-first kernels with cuDNN in both layouts\n"
                << "  hint: use --layout nchw\n";
      return 2;
    }
    const bool depthwise = conv && std::find(table["fields"].begin(), table["fields"].end(), "K") == table["fields"].end();
    if (depthwise && layout == "nhwc") {
      std::cerr << "tmap_bench: error: --layout nhwc: tmap's depthwise_conv2d is channels-first\n  hint: use --layout nchw\n";
      return 2;
    }
    const std::string conv_op = depthwise ? "depthwise_conv2d" : rank == 1 ? "conv1d" : rank == 3 ? "conv3d"
                                : layout == "nhwc" ? "conv2d_nhwc" : "conv2d";
    // Memory-bound tables (their description asks for GB/s): achieved bandwidth beside the times,
    // against the device-to-device copy bandwidth measured in this run.
    const bool bandwidth = table.value("description", std::string()).find("GB/s") != std::string::npos;
    const std::string layout_name = rank == 1 ? "ncw" : rank == 3 ? "ncdhw" : layout;
    // Each workload of the table as the op and parameters tmap builds it from.
    struct Entry {
      std::string name, op;
      std::vector<std::string> sets;
      int count = 1;
      std::optional<tmap::TableWorkload> workload;  ///< A workload table's entry (with its epilogue).
      bool of_range = false;  ///< A size of a range workload: run with the kernel its bucket dispatches to.
    };
    std::vector<Entry> entries;
    if (model) {
      if (in_dtype.empty()) in_dtype = model->dtype;
      if (!table_out_dtype_given) out_dtype = model->out_dtype;
      // A range of sizes is compared at each of its sizes (its "sizes", else the tuner's samples).
      for (const auto& range : model->workloads) {
        const std::vector<std::int64_t> sizes =
            !range.ranged() || !range.sizes.empty() ? range.sizes
                                                    : tmap::range_sample_sizes(range.range_lo, range.range_hi());
        for (const auto& w : tmap::workloads_at_sizes(range, sizes)) {
          if (!only.empty() && w.name != only && range.name != only) continue;
          Entry e{w.name, w.op, {}, w.count, w, range.ranged()};
          for (const auto& [k, v] : w.params) e.sets.push_back(k + "=" + std::to_string(v));
          entries.push_back(e);
        }
      }
    }
    if (!model && out_dtype.empty()) out_dtype = default_out_dtype(in_dtype);
    for (const auto& entry : model ? nlohmann::json::array() : conv ? table["layers"] : table["shapes"]) {
      Entry e{entry["name"], conv ? conv_op : "gemm", {}, 1, std::nullopt, false};
      if (!only.empty() && e.name != only) continue;
      if (conv) {
        e.sets.push_back("N=" + std::to_string(batch));
        for (const auto& field : table["fields"]) {
          const std::string key = field;
          if (key == "dilation") continue;
          e.sets.push_back(key + "=" + std::to_string(entry.at(key).get<int>()));
        }
        e.sets.push_back("dil=" + std::to_string(entry.value("dilation", 1)));
      } else {
        for (const char* key : {"M", "N", "K"}) e.sets.push_back(std::string(key) + "=" + std::to_string(entry[key].get<int>()));
      }
      entries.push_back(e);
    }
    auto compute_of = [&](const Entry& e) {
      return e.workload ? tmap::build_table_workload(*e.workload, in_dtype, out_dtype, table_path)
                        : build_workload(e.op, e.sets, in_dtype, out_dtype);
    };
    // The first workload's compute: the table's dtypes (its workloads share them) and its peak.
    const std::optional<Compute> first =
        entries.empty() ? std::nullopt : std::optional<Compute>(compute_of(entries.front()));
    if (peak_tflops <= 0)
      peak_tflops = h100_peak_tflops(first ? first->tensor_of(first->inputs[0]).dtype : tmap::DType::kFloat16);
    if (print_workloads) {
      const tmap::LogContents log = tmap::read_log(log_path);
      const auto best = tmap::best_records(log.records);
      for (const auto& e : entries) {
        Compute c = compute_of(e);
        const Compute bare = build_workload(e.op, e.sets, in_dtype, out_dtype);
        Transfer transfer;
        const tmap::TuneRecord* record = dispatch_first || e.of_range ? nullptr : find_record(best, c, &bare, transfer);
        // With --dispatch: the key of the range whose bucket serves it (its arch: the log's first record's).
        const tmap::Dispatch d = record || log.records.empty()
                                     ? tmap::Dispatch{}
                                     : tmap::dispatch(log.records, c, log.records.front().target.arch);
        std::cout << e.name << " "
                  << (record ? record->workload.key : d.bucket ? d.bucket->workload.key : tmap::make_workload(c).key) << " "
                  << e.op;
        for (const auto& s : e.sets) std::cout << " --set " << s;
        std::cout << "\n";
      }
      return 0;
    }
    const tmap::RuntimeInfo rt = tmap::query_runtime();
    if (rt.devices.empty()) {
      std::cerr << "tmap_bench: error: no GPU: " << rt.status << "\n  hint: run it on the GPU machine\n";
      return 2;
    }
    const int cc = rt.devices.front().compute_capability;
    const double copy_gbs = bandwidth ? copy_bandwidth_gbs() : 0;
    const std::vector<tmap::HwAbstraction> hws = tmap::load_hw_abstractions();
    tmap::LogContents log = tmap::read_log(log_path);
    for (const auto& w : log.warnings) std::cerr << "warning: " << w << "\n";
    const auto best = tmap::best_records(log.records);
    tmap::NvrtcCompiler compiler(cc);

    std::vector<Row> rows;
    for (const Entry& e : entries) {
      const std::string& name = e.name;
      Compute c = compute_of(e);
      Row row;
      row.name = name;
      row.workload_key = tmap::make_workload(c).key;
      row.gflop = 2.0 * c.iteration_points() / 1e9;
      for (const auto& t : c.tensors) row.bytes += static_cast<double>(t.num_elements()) * tmap::dtype_bits(t.dtype) / 8;
      trace(name + ": inputs");
      tmap::Workspace ws(c, 2024);
      trace(name + ": reference kernel");
      const std::vector<double> ref = tmap::gpu_reference(ws, compiler);
      trace(name + ": tmap's kernel");
      std::vector<double> tmap_out;
      const Compute bare = build_workload(e.op, e.sets, in_dtype, out_dtype);
      Transfer transfer;
      const tmap::TuneRecord* record = dispatch_first || e.of_range ? nullptr : find_record(best, c, &bare, transfer);
      const tmap::Dispatch dispatched =
          record ? tmap::Dispatch{} : tmap::dispatch(log.records, c, "sm_" + std::to_string(cc));
      if (dispatched.bucket) {  // the kernel of a range, run at this size
        tmap::Regenerated g = tmap::regenerate(*dispatched.bucket, hws, cc);
        tmap::CompileResult bin = compiler.compile(g.kernel.code, g.kernel.name);
        if (!bin.ok) throw std::runtime_error("regenerated kernel does not compile:\n" + bin.log);
        const int a = c.inputs[g.gemm().a_input].tensor, b = c.inputs[g.gemm().b_input].tensor;
        const tmap::TimingOptions warm = bench_timing(graph_runs, false), cold = bench_timing(graph_runs, true);
        tmap::KernelRun run = tmap::run_candidate(ws, ref, a, b, g.kernel, bin.cubin, warm, dispatched.size);
        if (!run.ok) throw std::runtime_error("tmap's kernel failed: " + run.error);
        tmap_out = ws.read_output();
        tmap::KernelRun cold_run = tmap::run_candidate(ws, {}, a, b, g.kernel, bin.cubin, cold, dispatched.size);
        if (!cold_run.ok) throw std::runtime_error("tmap's kernel failed when timed cold: " + cold_run.error);
        row.tmap = Timing{run.median_us, cold_run.median_us};
        row.tmap_err = run.rel_l2;
        row.note = run.rel_l2 > 1e-2 ? "tmap's kernel is WRONG" : "";
        row.note += (row.note.empty() ? "" : "; ") + std::string("the kernel of ") + g.compute->dynamic.param + " = " +
                    std::to_string(dispatched.bucket->result.bucket_lo) + ".." +
                    std::to_string(dispatched.bucket->result.bucket_hi) + " of a range";
      } else if (record) {
        const CompiledRecord k = compile_record(*record, c, hws, cc, compiler);
        tmap::KernelRun run =
            tmap::run_candidate(ws, ref, k.a, k.b, k.g.kernel, k.bin.cubin, bench_timing(graph_runs, false));
        if (!run.ok) throw std::runtime_error("tmap's kernel failed: " + run.error);
        tmap_out = ws.read_output();
        tmap::KernelRun cold_run =
            tmap::run_candidate(ws, {}, k.a, k.b, k.g.kernel, k.bin.cubin, bench_timing(graph_runs, true));
        if (!cold_run.ok) throw std::runtime_error("tmap's kernel failed when timed cold: " + cold_run.error);
        row.tmap = Timing{run.median_us, cold_run.median_us};
        row.tmap_err = run.rel_l2;
        if (run.rel_l2 > 1e-2) row.note = "tmap's kernel is WRONG";
        if (transfer != Transfer::kNone) row.note += (row.note.empty() ? "" : "; ") + transfer_note(transfer);
        if (!c.epilogue.empty()) {
          trace(name + ": the same schedule without the epilogue");
          measure_epilogue_cost(row, *record, k, ws, bare, hws, cc, graph_runs, compiler);
        }
      } else {
        row.note = "not in the log (tune it first)";
      }
      trace(name + ": baselines");
      row.count = e.count;
      RowKind kind;
      if (model ? is_conv_op(e.op) : conv) {
        kind.rank = model ? (e.op == "conv1d" ? 1 : e.op == "conv3d" ? 3 : 2) : rank;
        kind.nhwc = model ? e.op == "conv2d_nhwc" : layout == "nhwc";
      }
      // The baselines read the op from the compute's name, which a table sets to the workload's.
      Compute op_compute = c;
      op_compute.name = e.op;
      measure_baselines(row, op_compute, ws, ref, tmap_out, kind, graph_runs, compiler);
      const Row& r = row;
      std::fprintf(stderr, "%-10s tmap %8s us  %-36s %8s us  speedup %s", r.name.c_str(),
                   r.tmap ? fixed(r.tmap->warm_us).c_str() : "-", r.baseline ? r.baseline->name.c_str() : "-",
                   r.baseline ? fixed(r.baseline->time.warm_us).c_str() : "-",
                   r.tmap && r.baseline ? fixed(r.baseline->time.warm_us / r.tmap->warm_us).c_str() : "-");
      if (r.other)
        std::fprintf(stderr, "  (other layout: %s %s us)", r.other->name.c_str(), fixed(r.other->time.warm_us).c_str());
      if (r.unfused)
        std::fprintf(stderr, "  (unfused: %s %s us)", r.unfused->name.c_str(), fixed(r.unfused->time.warm_us).c_str());
      std::fprintf(stderr, "\n");
      rows.push_back(std::move(row));
    }

    // Geometric-mean speedups (baseline time / tmap time) over rows with both.
    double log_sum = 0, log_sum_cold = 0, log_sum_fastest = 0;
    int both = 0, with_fastest = 0;
    for (const auto& r : rows) {
      if (r.tmap && r.baseline) {
        log_sum += std::log(r.baseline->time.warm_us / r.tmap->warm_us);
        log_sum_cold += std::log(r.baseline->time.cold_us / r.tmap->cold_us);
        ++both;
      }
      if (r.tmap && r.fastest()) {
        log_sum_fastest += std::log(r.fastest()->time.warm_us / r.tmap->warm_us);
        ++with_fastest;
      }
    }
    const double geo = both ? std::exp(log_sum / both) : 0, geo_cold = both ? std::exp(log_sum_cold / both) : 0;
    const double geo_fastest = with_fastest ? std::exp(log_sum_fastest / with_fastest) : 0;
    double log_sum_unfused = 0;
    int with_unfused = 0;
    for (const auto& r : rows)
      if (r.tmap && r.unfused) log_sum_unfused += std::log(r.unfused->time.warm_us / r.tmap->warm_us), ++with_unfused;
    const double geo_unfused = with_unfused ? std::exp(log_sum_unfused / with_unfused) : 0;
    int cudnn_version = static_cast<int>(cudnnGetVersion());
    int cublas_version = 0;
    cublasGetProperty(MAJOR_VERSION, &cublas_version);
    // The table's own name: its "title", else what its file is known as, else the file's stem.
    const std::string stem = std::filesystem::path(table_path).stem().string();
    const std::string kind = table.contains("title") && table["title"].is_string() ? table["title"].get<std::string>()
                             : depthwise                                        ? "depthwise conv2d"
                             : stem.find("grouped") != std::string::npos         ? "grouped conv2d"
                             : stem.find("resnet18") != std::string::npos        ? "ResNet-18 conv2d"
                             : stem == "conv1d" || stem == "conv3d"             ? stem
                                                                                : "conv" + std::to_string(rank) + "d (" + stem + ")";
    const std::string what = (model ? kind + " (workload table)" : conv ? kind + ", batch " + std::to_string(batch) + ", " + layout_name
                                   : table_path.find("skinny") != std::string::npos ? "skinny GEMM" : "GEMM") +
                             ", " + dtypes_text(first ? &*first : nullptr);
    // Achieved bandwidth of tmap's kernel, cold L2 (every tensor read or written once), and its
    // share of the copy bandwidth.
    auto gbs = [](const Row& r) { return r.bytes / (r.tmap->cold_us * 1e-6) / 1e9; };
    int transfers = 0, bare_schedules = 0;
    for (const auto& r : rows) transfers += r.note.find(transfer_note(Transfer::kOtherDtype)) != std::string::npos;
    for (const auto& r : rows) bare_schedules += r.note.find(transfer_note(Transfer::kWithoutEpilogue)) != std::string::npos;
    if (!csv_path.empty()) {
      std::ofstream csv(csv_path);
      csv << "workload,key,gflop,tmap_us,tmap_cold_us,tmap_tflops,baseline,baseline_us,baseline_cold_us,speedup,"
             "speedup_cold,pct_peak,tmap_rel_l2,baseline_vs_tmap_rel_l2,note,other_layout_baseline,other_layout_us,"
             "speedup_vs_fastest_layout,tmap_cold_gbs,pct_copy_bandwidth,unfused_baseline,unfused_us,speedup_vs_unfused,"
             "bare_us,epilogue_cost_pct\n";
      for (const auto& r : rows) {
        csv << csv_text(r.name) << "," << r.workload_key << "," << r.gflop << ",";
        if (r.tmap) csv << r.tmap->warm_us << "," << r.tmap->cold_us << "," << r.gflop / r.tmap->warm_us * 1e3;
        else csv << ",,";
        csv << ",";
        if (r.baseline) csv << csv_text(r.baseline->name) << "," << r.baseline->time.warm_us << "," << r.baseline->time.cold_us;
        else csv << ",,";
        csv << ",";
        if (r.tmap && r.baseline)
          csv << r.baseline->time.warm_us / r.tmap->warm_us << "," << r.baseline->time.cold_us / r.tmap->cold_us << ","
              << r.gflop / r.tmap->warm_us * 1e3 / peak_tflops * 100;
        else csv << ",,";
        csv << "," << (r.tmap ? r.tmap_err : 0) << "," << (r.baseline ? r.baseline->err_tmap : 0) << "," << csv_text(r.note);
        if (r.other) csv << "," << csv_text(r.other->name) << "," << r.other->time.warm_us;
        else csv << ",,";
        csv << ",";
        if (r.tmap && r.fastest()) csv << r.fastest()->time.warm_us / r.tmap->warm_us;
        csv << ",";
        if (r.tmap && bandwidth) csv << gbs(r) << "," << gbs(r) / copy_gbs * 100;
        else csv << ",";
        if (r.unfused) csv << "," << csv_text(r.unfused->name) << "," << r.unfused->time.warm_us << ",";
        else csv << ",,,";
        if (r.tmap && r.unfused) csv << r.unfused->time.warm_us / r.tmap->warm_us;
        csv << ",";
        if (r.epilogue_cost()) csv << *r.bare_us << "," << *r.epilogue_cost() * 100;
        else csv << ",";
        csv << "\n";
      }
    }
    bool any_conv = conv;
    for (const auto& e : entries) any_conv = any_conv || (model && is_conv_op(e.op));
    // A table of fused workloads compares with the unfused sequence where others compare layouts.
    bool any_fused = false;
    for (const auto& e : entries) any_fused = any_fused || (e.workload && !e.workload->epilogue.empty());
    const bool layout_cols = any_conv && !any_fused, extra_cols = layout_cols || any_fused;
    std::ostringstream md;
    md << "### " << what << "\n\n"
       << "Device " << rt.devices.front().name << ", driver " << tmap::cuda_version_text(rt.driver_version) << ", CUDA "
       << tmap::cuda_version_text(rt.runtime_version) << ", cuDNN " << cudnn_version / 10000 << "."
       << cudnn_version % 10000 / 100 << "." << cudnn_version % 100 << ", cuBLAS " << cublas_version << "; tmap "
       << (commit.empty() ? "(commit unknown)" : commit) << ", " << utc_date()
       << ". Times in us: median of CUDA-graph replays of " << graph_runs
       << " runs (warm L2); cold: the same with an L2 flush (a read of twice the L2's size) before each run, the "
          "flushes' own time subtracted. "
          "Speedup = baseline / tmap.\n\n"
       << (layout_cols ? "cuDNN runs in tmap's layout (baseline, speedup) and in the other layout, on the same values "
                     "transposed (other layout us; vs fastest: against the faster of the two).\n\n"
                   : "")
       << (any_fused ? "Fused epilogues, all in tmap's layout: the baseline is the fastest of cuDNN's fused calls (the "
                       "backend graph of the convolution and the epilogue's pointwise operations; "
                       "cudnnConvolutionBiasActivationForward), cuBLASLt's epilogues, and the unfused sequence (the "
                       "strongest bare contraction, then one elementwise kernel per operation through memory, as a "
                       "framework without fusion runs them: unfused us, vs unfused).\n\n"
                     : "")
       << (bandwidth ? "Memory-bound: tmap GB/s is every tensor's bytes moved once over tmap's cold time; the "
                       "device-to-device copy bandwidth measured in this run is " + fixed(copy_gbs, 0) + " GB/s.\n\n"
                     : "")
       << "| workload | tmap us | baseline | baseline us | speedup | cold speedup |"
       << (layout_cols ? " other layout us | vs fastest |" : any_fused ? " unfused us | vs unfused | epilogue cost |" : "")
       << " tmap TFLOP/s | % of peak |"
       << (bandwidth ? " tmap GB/s (cold) | % of copy |" : "") << "\n"
       << "| --- | ---: | --- | ---: | ---: | ---: |" << (extra_cols ? " ---: | ---: |" : "")
       << (any_fused ? " ---: |" : "") << " ---: | ---: |"
       << (bandwidth ? " ---: | ---: |" : "") << "\n";
    for (const auto& r : rows) {
      md << "| " << r.name << " | " << (r.tmap ? fixed(r.tmap->warm_us) : "-") << " | "
         << (r.baseline ? r.baseline->name : "-") << " | " << (r.baseline ? fixed(r.baseline->time.warm_us) : "-")
         << " | ";
      const std::optional<Baseline>& other = any_fused ? r.unfused : r.other;
      const std::optional<Baseline>& vs = any_fused ? r.unfused : r.fastest();
      const std::string other_cols =
          !extra_cols ? ""
                      : (other ? fixed(other->time.warm_us) : std::string("-")) + " | " +
                            (r.tmap && vs ? fixed(vs->time.warm_us / r.tmap->warm_us) : std::string("-")) + " | " +
                            (!any_fused ? std::string() : percent_text(r.epilogue_cost()) + " | ");
      if (r.tmap && r.baseline)
        md << fixed(r.baseline->time.warm_us / r.tmap->warm_us) << " | "
           << fixed(r.baseline->time.cold_us / r.tmap->cold_us) << " | " << other_cols
           << fixed(r.gflop / r.tmap->warm_us * 1e3, 1)
           << " | " << fixed(r.gflop / r.tmap->warm_us * 1e3 / peak_tflops * 100, 1) << " |"
           << (bandwidth ? " " + fixed(gbs(r), 0) + " | " + fixed(gbs(r) / copy_gbs * 100, 1) + " |" : "");
      else
        md << "- | - | " << other_cols << "- | - |" << (r.note.empty() ? "" : " " + r.note);
      md << "\n";
    }
    md << "\nGeometric-mean speedup over " << both << " workloads: " << fixed(geo) << " (cold L2: " << fixed(geo_cold)
       << ")" << (layout_cols ? "; against cuDNN's fastest layout: " + fixed(geo_fastest) : std::string())
       << (any_fused ? "; against the unfused sequence: " + fixed(geo_unfused) : std::string()) << ".\n";
    if (any_fused) md << epilogue_cost_summary(rows);
    if (model) {  // the model's time: each workload's time times its count, over the workloads all have
      double t = 0, base = 0, fastest = 0, unfused = 0;
      int n = 0, skipped = 0;
      for (const auto& r : rows) {
        if (!r.tmap || !r.baseline) {
          ++skipped;
          continue;
        }
        t += r.count * r.tmap->warm_us;
        base += r.count * r.baseline->time.warm_us;
        fastest += r.count * (r.fastest() ? r.fastest()->time.warm_us : r.baseline->time.warm_us);
        unfused += r.count * (r.unfused ? r.unfused->time.warm_us : r.baseline->time.warm_us);
        ++n;
      }
      md << "\nModel total (sum of count x time over " << n << " workloads" << (skipped ? ", " + std::to_string(skipped) + " without both left out" : std::string())
         << "): tmap " << fixed(t) << " us, cuDNN/cuBLAS " << fixed(base) << " us (speedup " << fixed(t > 0 ? base / t : 0)
         << ")" << (layout_cols ? ", cuDNN in its fastest layout " + fixed(fastest) + " us (speedup " + fixed(t > 0 ? fastest / t : 0) + ")" : std::string())
         << (any_fused ? ", the unfused sequence " + fixed(unfused) + " us (speedup " + fixed(t > 0 ? unfused / t : 0) + ")"
                       : std::string())
         << ".\n";
    }
    if (transfers)
      md << transfers << " of tmap's kernels replay schedules tuned for another output dtype (the log holds no "
         << (first ? tmap::dtype_name(first->tensor_of(first->output).dtype) : "")
         << "-output record of their workload).\n";
    if (bare_schedules)
      md << bare_schedules << " of tmap's kernels replay the schedule tuned for their contraction without the "
         << "epilogue (the log holds no record of the fused workload).\n";
    if (!md_path.empty()) std::ofstream(md_path) << md.str();
    std::cout << md.str();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tmap_bench: error: " << e.what() << "\n";
    return 1;
  }
}
