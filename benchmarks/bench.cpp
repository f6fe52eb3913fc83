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
#include <nvtx3/nvToolsExt.h>

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
#include "bench_report.h"
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

/// A workload of the table as the op and parameters tmap builds it from.
struct Entry {
  std::string name, op;
  std::vector<std::string> sets;
  int count = 1;
  std::optional<tmap::TableWorkload> workload;  ///< A workload table's entry (with its epilogue).
  bool of_range = false;  ///< A size of a range workload: run with the kernel its bucket dispatches to.
};

/// The workloads of a workload table (tmap import); a range of sizes at each of its sizes (its
/// "sizes", else the tuner's samples). Only `only`'s, when given.
std::vector<Entry> model_entries(const tmap::WorkloadTable& model, const std::string& only) {
  std::vector<Entry> entries;
  for (const auto& range : model.workloads) {
    const std::vector<std::int64_t> sizes =
        !range.ranged() || !range.sizes.empty() ? range.sizes : tmap::range_sample_sizes(range.range_lo, range.range_hi());
    for (const auto& w : tmap::workloads_at_sizes(range, sizes)) {
      if (!only.empty() && w.name != only && range.name != only) continue;
      Entry e{w.name, w.op, {}, w.count, w, range.ranged()};
      for (const auto& [k, v] : w.params) e.sets.push_back(k + "=" + std::to_string(v));
      entries.push_back(e);
    }
  }
  return entries;
}

/// The workloads of a convolution table's "layers" at `batch` (`conv_op` names the op) or, with
/// no `conv_op`, of a GEMM table's "shapes". Only `only`'s, when given.
std::vector<Entry> fixed_entries(const nlohmann::json& table, const std::string& conv_op, int batch,
                                 const std::string& only) {
  std::vector<Entry> entries;
  const bool conv = !conv_op.empty();
  for (const auto& entry : conv ? table["layers"] : table["shapes"]) {
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
  return entries;
}

/// --print-workloads: each entry as "name key op --set ...", the key that of the log record the
/// benchmark would replay, or with --dispatch (`dispatch_first`) that of the range whose bucket
/// serves it (its arch: the log's first record's).
void print_entries(const std::vector<Entry>& entries, const std::function<Compute(const Entry&)>& compute_of,
                   const tmap::LogContents& log, bool dispatch_first) {
  const auto best = tmap::best_records(log.records);
  for (const auto& e : entries) {
    Compute c = compute_of(e);
    const Compute bare = tmap::contraction_of(c);
    Transfer transfer;
    const tmap::TuneRecord* record = dispatch_first || e.of_range ? nullptr : find_record(best, c, &bare, transfer);
    const tmap::Dispatch d = record || log.records.empty()
                                 ? tmap::Dispatch{}
                                 : tmap::dispatch(log.records, c, log.records.front().target.arch);
    std::cout << e.name << " "
              << (record ? record->workload.key : d.bucket ? d.bucket->workload.key : tmap::make_workload(c).key) << " "
              << e.op;
    for (const auto& s : e.sets) std::cout << " --set " << s;
    std::cout << "\n";
  }
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

/// `g`, a kernel run on compute `c`, compiled.
CompiledRecord compile_regenerated(tmap::Regenerated g, const Compute& c, tmap::NvrtcCompiler& compiler) {
  CompiledRecord k{std::move(g), {}};
  k.bin = compiler.compile(k.g.kernel.code, k.g.kernel.name);
  if (!k.bin.ok) throw std::runtime_error("regenerated kernel does not compile:\n" + k.bin.log);
  k.a = c.inputs[k.g.gemm().a_input].tensor;
  k.b = c.inputs[k.g.gemm().b_input].tensor;
  return k;
}

CompiledRecord compile_record(const tmap::TuneRecord& record, const Compute& c,
                              const std::vector<tmap::HwAbstraction>& hws, int cc, tmap::NvrtcCompiler& compiler) {
  tmap::TuneRecord adapted = record;
  adapted.workload = tmap::make_workload(c);
  return compile_regenerated(tmap::regenerate(adapted, hws, cc), c, compiler);
}

/// tmap's kernel `k`, verified against `ref` and timed warm and cold into `row` (at `size` of a
/// range; 0: a fixed shape). Returns its output.
std::vector<double> time_tmap_kernel(Row& row, tmap::Workspace& ws, const std::vector<double>& ref,
                                     const CompiledRecord& k, int graph_runs, std::int64_t size) {
  const tmap::KernelRun run =
      tmap::run_candidate(ws, ref, k.a, k.b, k.g.kernel, k.bin.cubin, bench_timing(graph_runs, false), size);
  if (!run.ok) throw std::runtime_error("tmap's kernel failed: " + run.error);
  std::vector<double> out = ws.read_output();
  const tmap::KernelRun cold =
      tmap::run_candidate(ws, {}, k.a, k.b, k.g.kernel, k.bin.cubin, bench_timing(graph_runs, true), size);
  if (!cold.ok) throw std::runtime_error("tmap's kernel failed when timed cold: " + cold.error);
  row.tmap = Timing{run.median_us, cold.median_us};
  row.tmap_err = run.rel_l2;
  if (run.rel_l2 > 1e-2) row.note = "tmap's kernel is WRONG";
  return out;
}

/// Adds `more` to the row's note.
void add_note(Row& row, const std::string& more) { row.note += (row.note.empty() ? "" : "; ") + more; }

/// Kernels `a` and `b` (each run given whether it is the first round) timed warm in kAbRounds
/// alternating rounds: each side's median. `b`, the one `what` names, is verified in its first
/// round.
std::pair<double, double> alternate(const std::function<tmap::KernelRun(bool)>& a,
                                    const std::function<tmap::KernelRun(bool)>& b, const std::string& what) {
  std::vector<double> a_us, b_us;
  for (int round = 0; round < kAbRounds; ++round) {
    const tmap::KernelRun x = a(round == 0), y = b(round == 0);
    if (!x.ok || !y.ok) throw std::runtime_error("the A/B with " + what + " failed: " + (x.ok ? y.error : x.error));
    if (!(y.rel_l2 <= 1e-2)) throw std::runtime_error(what + " is WRONG");  // NaN too
    a_us.push_back(x.median_us);
    b_us.push_back(y.median_us);
  }
  return {tmap::median_of(a_us), tmap::median_of(b_us)};
}

/// An NVTX range open while this lives, which a profiler can select the A/B's kernels by
/// (`ncu --nvtx --nvtx-include "ab_bare/"`); without a profiler attached it costs nothing.
struct NvtxRange {
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

/// What `fused`'s epilogue costs on `record`'s schedule: the kernel with and without it (the bare
/// contraction `bare`, verified against its own reference; with no epilogue to prefetch for or
/// apply, so epi_prefetch and epi_regs 0), timed warm in kAbRounds alternating rounds, each side's
/// median kept in `row`.
void measure_epilogue_cost(Row& row, const tmap::TuneRecord& record, const CompiledRecord& fused, tmap::Workspace& ws,
                           const Compute& bare, const std::vector<tmap::HwAbstraction>& hws, int cc,
                           int graph_runs, tmap::NvrtcCompiler& compiler) {
  tmap::Workspace bare_ws(bare, 2024);
  const std::vector<double> bare_ref = tmap::gpu_reference(bare_ws, compiler);
  tmap::TuneRecord bare_record = record;
  bare_record.candidate.params.epi_prefetch = 0;
  bare_record.candidate.params.epi_regs = 0;
  const CompiledRecord k = compile_record(bare_record, bare, hws, cc, compiler);
  const auto [with, without] = alternate(
      [&](bool) {
        const NvtxRange range("ab_fused");
        return tmap::run_candidate(ws, {}, fused.a, fused.b, fused.g.kernel, fused.bin.cubin,
                                   bench_timing(graph_runs, false));
      },
      [&](bool first) {
        const NvtxRange range("ab_bare");
        return tmap::run_candidate(bare_ws, first ? bare_ref : std::vector<double>(), k.a, k.b, k.g.kernel,
                                   k.bin.cubin, bench_timing(graph_runs, false));
      },
      "the schedule without the epilogue");
  row.fused_ab_us = with;
  row.bare_us = without;
}

/// At size `size` of a range: the kernel of that size's own tuning (the best record of the range's
/// sample there) against `dispatched`, the kernel of its bucket, timed warm in kAbRounds
/// alternating rounds, each side's median kept in `row`: what serving the size from a bucket
/// costs, A/B in the same run. Nothing when the size was no sample; no timing when both are one kernel.
void measure_own_size(Row& row, const std::vector<const tmap::TuneRecord*>& best, const tmap::TuneRecord& bucket,
                      const CompiledRecord& dispatched, std::int64_t size, tmap::Workspace& ws,
                      const std::vector<double>& ref, const std::vector<tmap::HwAbstraction>& hws, int cc,
                      int graph_runs, tmap::NvrtcCompiler& compiler) {
  const std::string key = tmap::make_workload(tmap::range_sample(*dispatched.g.compute, size)).key;
  const auto own = std::find_if(best.begin(), best.end(), [&](const tmap::TuneRecord* r) { return r->workload.key == key; });
  if (own == best.end()) return;
  if (tmap::candidate_signature((*own)->candidate) == tmap::candidate_signature(bucket.candidate)) {
    row.own_size_us = row.dispatched_ab_us = row.tmap->warm_us;
    return;
  }
  const CompiledRecord k = compile_regenerated(tmap::regenerate(**own, hws, cc), *dispatched.g.compute, compiler);
  const auto [served, tuned] = alternate(
      [&](bool) { return tmap::run_candidate(ws, {}, dispatched.a, dispatched.b, dispatched.g.kernel,
                                             dispatched.bin.cubin, bench_timing(graph_runs, false), size); },
      [&](bool first) { return tmap::run_candidate(ws, first ? ref : std::vector<double>(), k.a, k.b, k.g.kernel,
                                                   k.bin.cubin, bench_timing(graph_runs, false), size); },
      "the kernel of the size's own tuning");
  row.dispatched_ab_us = served;
  row.own_size_us = tuned;
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
  if (!fused) add_note(row, note.empty() ? "no fused call ran" : note);
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
    add_note(row, e.what());
  }
  if (!row.baseline) add_note(row, "no correct baseline");
}

/// tmap_bench's command line.
struct BenchArgs {
  std::string table_path, log_path, layout, csv_path, md_path, only, in_dtype, out_dtype, commit;
  int batch = 1, graph_runs = 20;
  double peak_tflops = 0;
  bool dispatch_first = false, print_workloads = false;
};

void add_options(CLI::App& app, BenchArgs& a) {
  app.add_option("--table", a.table_path,
                 "benchmarks/workloads/resnet18_conv2d.json, conv1d.json, conv3d.json or gemm.json")
      ->required();
  app.add_option("--batch", a.batch, "Batch of the convolution table (see its \"batches\")");
  app.add_option("--layout", a.layout,
                 "nchw (channels first: NCW, NCHW, NCDHW) or nhwc (channels last; conv2d only) for tmap's kernels "
                 "and the first baseline; cuDNN also runs in the other layout (default: nhwc for conv2d, nchw for the "
                 "conv1d, conv3d and depthwise tables)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_option("--log", a.log_path, "Tuning log with tmap's records")->required();
  app.add_option("--csv", a.csv_path, "Write the results as CSV");
  app.add_option("--md", a.md_path, "Write the results as a Markdown table");
  app.add_option("--only", a.only, "Only the workload of this name");
  app.add_option("--dtype", a.in_dtype,
                 "Inputs' dtype of tmap and the baselines alike: float16 (default; a workload table's own), "
                 "bfloat16, float32 (tf32 Tensor Cores), int8 (cuDNN writes its sums as float32), float8_e4m3 and "
                 "float8_e5m2 (cuBLASLt, gemm_nt)");
  app.add_option("--out-dtype", a.out_dtype,
                 "Output dtype of tmap and the baselines alike (default float16 for float16 inputs, as cuDNN and "
                 "cuBLAS users run them; a wider one where the inputs' sums need it, e.g. int32 for int8)");
  app.add_option("--graph", a.graph_runs, "Runs per CUDA graph replay (default 20)");
  app.add_flag("--dispatch", a.dispatch_first,
               "Replay each workload with the kernel that a tuned range of sizes (tmap tune --set M=LO..HI) "
               "dispatches to its size, even where the log has a record of the shape itself (without it, only "
               "where it has none, and for the sizes of a table's range workloads)");
  app.add_flag("--print-workloads", a.print_workloads,
               "Print each workload as 'name key op --set ...' (for run.sh) and exit; no GPU needed. The key is "
               "that of the log record the benchmark would replay, when there is one");
  app.add_option("--commit", a.commit, "The tmap commit being measured, for the table's header (run.sh passes git's)");
  app.add_option("--peak", a.peak_tflops,
                 "The GPU's dense Tensor Core peak for the inputs' dtype in TFLOP/s, for '% of peak' (default the "
                 "H100 SXM's: 989.4 for 16-bit inputs, half for tf32, twice for 8-bit)");
}

/// What a table is: a workload table (tmap import: any mix of ops, each against cuDNN or cuBLAS by
/// its kind, with the model's weighted total), a convolution table of `rank` spatial dimensions,
/// or a GEMM table; the op and layout its convolutions run in.
struct TableKind {
  std::optional<tmap::WorkloadTable> model;
  bool conv = false, depthwise = false;
  bool bandwidth = false;  ///< Memory-bound (its description asks for GB/s): bandwidth beside the times.
  int rank = 0;
  std::string conv_op, layout_name;
};

/// `table`'s kind; nothing, having said why, when `a.layout` does not fit it. Without --layout,
/// `a.layout` becomes the table's own: channels first where tmap has no channels-last op.
std::optional<TableKind> table_kind(const nlohmann::json& table, BenchArgs& a) {
  TableKind k;
  if (table.contains("workloads")) k.model = tmap::load_workload_table(a.table_path);
  k.conv = table.contains("layers");
  if (k.conv) {
    const auto& f = table.at("fields");
    auto has = [&](const char* key) { return std::find(f.begin(), f.end(), key) != f.end(); };
    k.rank = has("D") ? 3 : has("H") ? 2 : 1;
    k.depthwise = !has("K");
  }
  if (a.layout.empty()) a.layout = k.conv && (k.rank != 2 || k.depthwise) ? "nchw" : "nhwc";
  if (k.conv && k.rank != 2 && a.layout == "nhwc") {
    std::cerr << "tmap_bench: error: --layout nhwc: tmap has no channels-last conv" << k.rank
              << "d op; the table compares tmap's channels-first kernels with cuDNN in both layouts\n"
              << "  hint: use --layout nchw\n";
    return std::nullopt;
  }
  if (k.depthwise && a.layout == "nhwc") {
    std::cerr << "tmap_bench: error: --layout nhwc: tmap's depthwise_conv2d is channels-first\n  hint: use --layout nchw\n";
    return std::nullopt;
  }
  k.conv_op = k.depthwise ? "depthwise_conv2d" : k.rank == 1 ? "conv1d" : k.rank == 3 ? "conv3d"
              : a.layout == "nhwc" ? "conv2d_nhwc" : "conv2d";
  k.bandwidth = table.value("description", std::string()).find("GB/s") != std::string::npos;
  k.layout_name = k.rank == 1 ? "ncw" : k.rank == 3 ? "ncdhw" : a.layout;
  return k;
}

/// What every row of a run shares.
struct BenchRun {
  const BenchArgs& args;
  const TableKind& kind;
  const std::vector<tmap::HwAbstraction>& hws;
  int cc = 0;
  const tmap::LogContents& log;
  std::vector<const tmap::TuneRecord*> best, sample_best;  ///< sample_best: with the samples of ranges.
  tmap::NvrtcCompiler& compiler;
};

/// tmap's kernel of entry `e` (compute `c`; `bare`, without its epilogue), verified and timed into
/// `row`: its log record, or the kernel its range's bucket dispatches to. Its output; empty when
/// the log has neither.
std::vector<double> time_tmap(Row& row, const Entry& e, const Compute& c, const Compute& bare, tmap::Workspace& ws,
                              const std::vector<double>& ref, const BenchRun& b) {
  const int graph_runs = b.args.graph_runs;
  Transfer transfer;
  const tmap::TuneRecord* record =
      b.args.dispatch_first || e.of_range ? nullptr : find_record(b.best, c, &bare, transfer);
  const tmap::Dispatch dispatched =
      record ? tmap::Dispatch{} : tmap::dispatch(b.log.records, c, "sm_" + std::to_string(b.cc));
  std::vector<double> out;
  if (dispatched.bucket) {  // the kernel of a range, run at this size
    const CompiledRecord k = compile_regenerated(tmap::regenerate(*dispatched.bucket, b.hws, b.cc), c, b.compiler);
    out = time_tmap_kernel(row, ws, ref, k, graph_runs, dispatched.size);
    add_note(row, "the kernel of " + k.g.compute->dynamic.param + " = " +
                      std::to_string(dispatched.bucket->result.bucket_lo) + ".." +
                      std::to_string(dispatched.bucket->result.bucket_hi) + " of a range");
    trace(e.name + ": the kernel of this size's own tuning");
    measure_own_size(row, b.sample_best, *dispatched.bucket, k, dispatched.size, ws, ref, b.hws, b.cc, graph_runs,
                     b.compiler);
  } else if (record) {
    const CompiledRecord k = compile_record(*record, c, b.hws, b.cc, b.compiler);
    out = time_tmap_kernel(row, ws, ref, k, graph_runs, 0);
    if (transfer != Transfer::kNone) add_note(row, transfer_note(transfer));
    if (!c.epilogue.empty()) {
      trace(e.name + ": the same schedule without the epilogue");
      measure_epilogue_cost(row, *record, k, ws, bare, b.hws, b.cc, graph_runs, b.compiler);
    }
  } else {
    row.note = "not in the log (tune it first)";
  }
  return out;
}

/// The row's line on stderr, as it is measured.
void print_progress(const Row& r) {
  std::fprintf(stderr, "%-10s tmap %8s us  %-36s %8s us  speedup %s", r.name.c_str(),
               r.tmap ? fixed(r.tmap->warm_us).c_str() : "-", r.baseline ? r.baseline->name.c_str() : "-",
               r.baseline ? fixed(r.baseline->time.warm_us).c_str() : "-",
               r.tmap && r.baseline ? fixed(r.baseline->time.warm_us / r.tmap->warm_us).c_str() : "-");
  if (r.other)
    std::fprintf(stderr, "  (other layout: %s %s us)", r.other->name.c_str(), fixed(r.other->time.warm_us).c_str());
  if (r.unfused)
    std::fprintf(stderr, "  (unfused: %s %s us)", r.unfused->name.c_str(), fixed(r.unfused->time.warm_us).c_str());
  std::fprintf(stderr, "\n");
}

/// Entry `e` (compute `c`): tmap's kernel and its baselines, on the same inputs.
Row bench_row(const Entry& e, const Compute& c, const BenchRun& b) {
  Row row;
  row.name = e.name;
  row.count = e.count;
  row.workload_key = tmap::make_workload(c).key;
  row.gflop = 2.0 * c.iteration_points() / 1e9;
  for (const auto& t : c.tensors) row.bytes += static_cast<double>(t.num_elements()) * tmap::dtype_bits(t.dtype) / 8;
  trace(e.name + ": inputs");
  tmap::Workspace ws(c, 2024);
  trace(e.name + ": reference kernel");
  const std::vector<double> ref = tmap::gpu_reference(ws, b.compiler);
  trace(e.name + ": tmap's kernel");
  const Compute bare = tmap::contraction_of(c);
  const std::vector<double> tmap_out = time_tmap(row, e, c, bare, ws, ref, b);
  trace(e.name + ": baselines");
  const bool model = b.kind.model.has_value();
  RowKind kind;
  if (model ? is_conv_op(e.op) : b.kind.conv) {
    kind.rank = model ? (e.op == "conv1d" ? 1 : e.op == "conv3d" ? 3 : 2) : b.kind.rank;
    kind.nhwc = model ? e.op == "conv2d_nhwc" : b.args.layout == "nhwc";
  }
  // The baselines read the op from the compute's name, which a table sets to the workload's.
  Compute op_compute = c;
  op_compute.name = e.op;
  measure_baselines(row, op_compute, ws, ref, tmap_out, kind, b.args.graph_runs, b.compiler);
  print_progress(row);
  return row;
}

/// The table's heading: its own name (its "title", else what its file is known as, else the
/// file's stem), its batch and layout, and the dtypes of its first workload `first`.
std::string table_title(const nlohmann::json& table, const BenchArgs& a, const TableKind& k, const Compute* first) {
  const std::string stem = std::filesystem::path(a.table_path).stem().string();
  const std::string kind = table.contains("title") && table["title"].is_string() ? table["title"].get<std::string>()
                           : k.depthwise                                      ? "depthwise conv2d"
                           : stem.find("grouped") != std::string::npos         ? "grouped conv2d"
                           : stem.find("resnet18") != std::string::npos        ? "ResNet-18 conv2d"
                           : stem == "conv1d" || stem == "conv3d"             ? stem
                                                                              : "conv" + std::to_string(k.rank) + "d (" + stem + ")";
  return (k.model  ? kind + " (workload table)"
          : k.conv ? kind + ", batch " + std::to_string(a.batch) + ", " + k.layout_name
          : a.table_path.find("skinny") != std::string::npos ? "skinny GEMM"
                                                              : "GEMM") +
         ", " + dtypes_text(first);
}

/// "Device NAME, driver X, CUDA Y, cuDNN Z, cuBLAS W".
std::string device_text(const tmap::RuntimeInfo& rt) {
  const int cudnn_version = static_cast<int>(cudnnGetVersion());
  int cublas_version = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_version);
  return "Device " + rt.devices.front().name + ", driver " + tmap::cuda_version_text(rt.driver_version) + ", CUDA " +
         tmap::cuda_version_text(rt.runtime_version) + ", cuDNN " + std::to_string(cudnn_version / 10000) + "." +
         std::to_string(cudnn_version % 10000 / 100) + "." + std::to_string(cudnn_version % 100) + ", cuBLAS " +
         std::to_string(cublas_version);
}

/// What the page says besides its rows, and which columns it has.
Report make_report(const nlohmann::json& table, const BenchArgs& a, const TableKind& k, const std::vector<Entry>& entries,
                   const Compute* first, const tmap::RuntimeInfo& rt, double copy_gbs) {
  bool any_conv = k.conv, any_fused = false;
  for (const auto& e : entries) {
    any_conv = any_conv || (k.model && is_conv_op(e.op));
    any_fused = any_fused || (e.workload && !e.workload->epilogue.empty());
  }
  Report report;
  report.title = table_title(table, a, k, first);
  report.device = device_text(rt);
  report.commit = a.commit;
  report.date = utc_date();
  report.graph_runs = a.graph_runs;
  report.peak_tflops = a.peak_tflops;
  report.copy_gbs = copy_gbs;
  // A table of fused workloads compares with the unfused sequence where others compare layouts.
  report.layout_cols = any_conv && !any_fused;
  report.fused = any_fused;
  report.ranged = std::any_of(entries.begin(), entries.end(), [](const Entry& e) { return e.of_range; });
  report.model = k.model.has_value();
  report.out_dtype = first ? tmap::dtype_name(first->tensor_of(first->output).dtype) : "";
  return report;
}

/// Times every entry of the table on the GPU and writes the page: `tmap_bench`'s work once the
/// table is read. Its exit status.
int bench_table(const nlohmann::json& table, const BenchArgs& a, const TableKind& k, const std::vector<Entry>& entries,
                const std::function<Compute(const Entry&)>& compute_of, const Compute* first) {
  const tmap::RuntimeInfo rt = tmap::query_runtime();
  if (rt.devices.empty()) {
    std::cerr << "tmap_bench: error: no GPU: " << rt.status << "\n  hint: run it on the GPU machine\n";
    return 2;
  }
  const int cc = rt.devices.front().compute_capability;
  const double copy_gbs = k.bandwidth ? copy_bandwidth_gbs() : 0;
  const std::vector<tmap::HwAbstraction> hws = tmap::load_hw_abstractions();
  const tmap::LogContents log = tmap::read_log(a.log_path);
  for (const auto& w : log.warnings) std::cerr << "warning: " << w << "\n";
  tmap::NvrtcCompiler compiler(cc);
  const BenchRun run{a, k, hws, cc, log, tmap::best_records(log.records), tmap::best_records(log.records, true), compiler};
  std::vector<Row> rows;
  for (const Entry& e : entries) rows.push_back(bench_row(e, compute_of(e), run));
  const Report report = make_report(table, a, k, entries, first, rt, copy_gbs);
  if (!a.csv_path.empty()) {
    std::ofstream csv(a.csv_path);
    write_csv(csv, rows, report);
  }
  const std::string md = markdown(rows, report);
  if (!a.md_path.empty()) std::ofstream(a.md_path) << md;
  std::cout << md;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tmap_bench: tmap's tuned kernels against cuDNN and cuBLAS, measured the same way"};
  BenchArgs a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);
  try {
    std::ifstream in(a.table_path);
    if (!in) {
      std::cerr << "tmap_bench: error: cannot read table '" << a.table_path << "'\n";
      return 2;
    }
    const nlohmann::json table = nlohmann::json::parse(in);
    const std::optional<TableKind> kind = table_kind(table, a);
    if (!kind) return 2;
    std::vector<Entry> entries;
    if (kind->model) {
      if (a.in_dtype.empty()) a.in_dtype = kind->model->dtype;
      if (a.out_dtype.empty()) a.out_dtype = kind->model->out_dtype;
      entries = model_entries(*kind->model, a.only);
    } else {
      if (a.out_dtype.empty()) a.out_dtype = default_out_dtype(a.in_dtype);
      entries = fixed_entries(table, kind->conv ? kind->conv_op : "", a.batch, a.only);
    }
    auto compute_of = [&](const Entry& e) {
      return e.workload ? tmap::build_table_workload(*e.workload, a.in_dtype, a.out_dtype, a.table_path)
                        : build_workload(e.op, e.sets, a.in_dtype, a.out_dtype);
    };
    // The first workload's compute: the table's dtypes (its workloads share them) and its peak.
    const std::optional<Compute> first =
        entries.empty() ? std::nullopt : std::optional<Compute>(compute_of(entries.front()));
    if (a.peak_tflops <= 0)
      a.peak_tflops = h100_peak_tflops(first ? first->tensor_of(first->inputs[0]).dtype : tmap::DType::kFloat16);
    if (a.print_workloads) {
      print_entries(entries, compute_of, tmap::read_log(a.log_path), a.dispatch_first);
      return 0;
    }
    return bench_table(table, a, *kind, entries, compute_of, first ? &*first : nullptr);
  } catch (const std::exception& e) {
    std::cerr << "tmap_bench: error: " << e.what() << "\n";
    return 1;
  }
}
