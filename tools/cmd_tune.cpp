// `tmap tune`: the search for the best kernel of a compute, a range of its sizes, or a model's or
// table's workloads; and the registration of the tuning commands (replay, logs and export live
// in cmd_replay.cpp and cmd_logs.cpp).
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tmap/codegen/device_library.h"
#include "tmap/export/export.h"
#include "tmap/frontend/onnx_import.h"
#include "tmap/frontend/workload_table.h"
#include "tmap/runtime/device.h"
#include "tmap/support/files.h"
#include "tmap/tune/cost_model.h"
#include "tmap/tune/model_tuner.h"
#include "tmap/tune/range_tuner.h"
#include "tmap/tune/shards.h"
#include "tmap/tune/tuner.h"
#include "tune_gpus.h"
#include "tuning_cli.h"

namespace tmap::cli {
namespace {

std::atomic<bool> g_interrupted{false};
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  g_interrupted.store(true);
}

/// While alive, SIGINT and SIGTERM ask the tuner to stop after the measurement in flight (it is
/// recorded); a second signal ends the process at once (SA_RESETHAND), which still leaves a valid
/// log because every record is appended by one write.
class StopOnSignals {
 public:
  StopOnSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopOnSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

/// Where the measuring workers' time went, in seconds, for the text and JSON outputs.
std::string phases_text(const MeasurePhases& w) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "in the worker: inputs %.1f, references %.1f, loading %.1f, first run and check %.1f, timing %.1f",
                w.inputs, w.reference, w.load, w.check, w.time);
  return buf;
}
nlohmann::json phases_json(const MeasurePhases& w) {
  return {{"inputs", w.inputs}, {"reference", w.reference}, {"load", w.load}, {"check", w.check}, {"time", w.time}};
}

/// Where a run's time went (TuneSummary's seconds), for the text and JSON outputs.
std::string time_text(const TuneSummary& s) {
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "time: measuring %.1f s (%s), waiting for compilation %.1f s, proposing %.1f s, recording %.1f s, "
                "fitting the model %.1f s",
                s.measure_s, phases_text(s.worker).c_str(), s.compile_wait_s, s.propose_s, s.record_s, s.fit_s);
  return buf;
}
nlohmann::json time_json(const TuneSummary& s) {
  return {{"measure", s.measure_s},
          {"measure_phases", phases_json(s.worker)},
          {"compile_wait", s.compile_wait_s},
          {"propose", s.propose_s},
          {"record", s.record_s},
          {"fit", s.fit_s}};
}

std::string duration_text(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}


struct TuneArgs {
  ComputeArgs compute;
  HwSelection hw;
  std::vector<std::string> prior, dims;
  std::string log, arch, measure = "gpu", enumerate = "amos", emit_cuda, cache_dir, format = "text";
  std::string model, table, layout = "nchw", shard, gpus = "all";
  std::int64_t batch = 0;        ///< --batch: the model's batch, as in tmap import.
  std::int64_t model_batch = 0;  ///< --model-batch: the old spelling of --batch.
  bool no_baselines = false;
  CLI::Option* trials_option = nullptr;
  std::vector<CLI::Option*> range_options;  ///< --loss, --max-buckets, --sizes: a range's alone.
  CLI::Option* trials_per_batch_option = nullptr;
  bool per_batch_given = false;  ///< By the deprecated --batch without --model.
  int trials = 200, early_stop = 0, trials_per_batch = 16, compile_ahead = 3, confirm = 4;
  double time_budget = 0, timeout = 10, measure_ms = kTuneMeasureMs;
  std::uint64_t seed = 0;
  double loss = 0.05;                ///< --loss: a range's buckets.
  int max_buckets = 0;               ///< --max-buckets: a range's kernels at most (0: no limit).
  std::vector<std::int64_t> sizes;   ///< --sizes: a range's samples.
};

void print_tune_summary(const TuneSummary& s, const Compute& c, const Workload& w, const std::string& log_path,
                        bool model_only) {
  std::printf("workload %s (%s): %s\n", w.key.c_str(), c.name.c_str(), c.statement_text().c_str());
  if (!c.epilogue.empty()) std::printf("  epilogue: %s\n", c.epilogue_text().c_str());
  std::printf("%d mappings searched; %d trials %s in %s (%d failed)%s; log %s\n", s.arms, s.measured,
              model_only ? "ranked and compiled" : "measured", duration_text(s.wall_s).c_str(), s.failed,
              s.resumed ? (", " + std::to_string(s.resumed) + " resumed").c_str() : "", log_path.c_str());
  if (s.transferred) std::printf("cost model warm-started from %d earlier measurements in the logs\n", s.transferred);
  if (s.offered)
    std::printf("seeds: %d schedules from the logs fit this space, %d tried, %d improved the best\n", s.offered,
                s.seeded, s.seed_wins);
  std::printf("stopped: %s\n", s.stop_reason.c_str());
  if (!model_only && s.measured > 0)
    std::printf("%s\n", time_text(s).c_str());
  if (!s.rank_correlations.empty()) {
    double sum = 0;
    for (double r : s.rank_correlations) sum += r;
    std::printf("cost model: rank correlation on unseen batches %.2f (mean of %zu), %.2f (last)\n",
                sum / s.rank_correlations.size(), s.rank_correlations.size(), s.rank_correlations.back());
  }
  if (!s.best) {
    std::printf("no correct kernel found\n");
    return;
  }
  const TuneRecord& b = *s.best;
  std::printf("best: %s\n  params %s\n", candidate_label(b.candidate).c_str(), to_json(b.candidate.params).dump().c_str());
  if (b.result.ok())
    std::printf("  %.2f us, %.2f TFLOP/s (rel L2 %.1e)\n", b.result.median_us, tflops(b), b.result.rel_l2);
  if (s.confirmed)
    std::printf("  confirmed: the %d fastest measured again in %d rounds in turn (%.1f s); the best measured once "
                "was %.2f us\n",
                s.confirmed, b.result.confirm_rounds, s.confirm_s, s.unconfirmed_best_us);
  else
    std::printf("  estimated %.2f us by the analytic model (unmeasured)\n", b.result.estimated_us);
  if (!s.history.empty()) {  // the best time as the trials went
    std::string line;
    for (int n : {25, 50, 100, 200, 500, 1000, 2000}) {
      double at = 0;
      for (const auto& [trial, us] : s.history)
        if (trial <= n) at = us;
      if (n > s.resumed + s.measured && n != 25) break;
      if (at > 0) line += "  " + std::to_string(n) + ": " + std::to_string(at).substr(0, 7) + " us";
    }
    std::printf("  best after N trials:%s\n", line.c_str());
  }
}

/// The options that tune one workload and a whole model alike.
TuneOptions tune_options(const TuneArgs& a, const Machine& m, const std::string& log_path) {
  TuneOptions o;
  o.trials = a.trials;
  o.time_budget_s = a.time_budget;
  o.early_stop = a.early_stop;
  // A batch per GPU by default: a batch's end waits for its last measurement, and each batch's
  // proposal has a fixed cost on the tuner's thread, which several GPUs would otherwise wait on.
  const bool batch_given = a.per_batch_given || (a.trials_per_batch_option && a.trials_per_batch_option->count());
  o.batch = a.trials_per_batch * (batch_given || a.measure == "model" ? 1 : std::max<int>(1, m.gpus.size()));
  o.confirm_top = a.confirm;
  o.seed = a.seed ? a.seed : std::random_device{}();
  o.enumeration = a.enumerate == "all" ? Enumeration::kAll : Enumeration::kAmos;
  o.log_path = log_path;
  check_writable_target(log_path, "--log");  // before the log is read: a FIFO would block
  o.prior_logs = a.prior;
  o.target = m.target;
  o.compute_capability = m.cc;
  o.limits = m.limits;
  o.device = m.model;
  o.compile_cache_dir = a.cache_dir;
  o.compile_ahead = a.compile_ahead;
  o.stop = &g_interrupted;
  o.on_note = [](const std::string& s) { spdlog::info("{}", s); };
  // Batches compile in `tmap compile-worker` processes: NVRTC threads of one process may not overlap.
  spdlog::debug("{} compile workers", use_compile_workers("/proc/self/exe"));
  return o;
}

/// Checks that this machine can measure, or that --measure model was asked for.
void check_measurable(const TuneArgs& a, const Machine& m) {
  if (a.measure == "model") return;
  if (!m.has_gpu)
    bad("tmap tune", "no GPU to measure on: " + m.rt.status,
        "add --measure model to rank candidates with the analytic model and check that they compile");
  if (m.cc != m.gpus.front().compute_capability)
    bad("--arch", "sm_" + std::to_string(m.cc) + " is not the GPU's architecture", "drop --arch, or add --measure model");
}

/// Keeps shard `s`'s workloads of `table` (shards.h), saying which.
void keep_shard(WorkloadTable& table, Shard s) {
  std::vector<double> costs;
  for (const auto& w : table.workloads) costs.push_back(tuning_cost_estimate(w.flops));
  const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
  std::vector<TableWorkload> kept;
  double mine = 0;
  for (std::size_t i : shard_workloads(costs, s)) kept.push_back(table.workloads[i]), mine += costs[i];
  spdlog::info("shard {}/{}: {} of the {} workloads, {:.0f}% of the estimated tuning cost", s.index, s.count, kept.size(),
               table.workloads.size(), total > 0 ? 100 * mine / total : 0.0);
  table.workloads = std::move(kept);
  table.title += " (shard " + std::to_string(s.index) + "/" + std::to_string(s.count) + ")";
}

/// The workloads of --model (imported) or --table, after checking the options that go with them.
WorkloadTable load_model_table(const TuneArgs& a) {
  if (!a.compute.file.empty() || !a.compute.op.empty())
    bad(a.model.empty() ? "--table" : "--model", "a model is tuned instead of one compute, not beside it",
        "drop the compute file or --op");
  if (a.model.empty() && (a.batch || !a.dims.empty() || a.layout != "nchw"))
    bad(a.batch ? "--batch" : a.dims.empty() ? "--layout" : "--dim", "only applies to --model",
        "a table's workloads are fixed: re-import the model with these settings");
  if (!a.emit_cuda.empty()) bad("--emit-cuda", "one file cannot hold a model's kernels", "use 'tmap export LOG --out DIR'");
  WorkloadTable table;
  if (!a.model.empty()) {
    OnnxImportOptions io;
    io.batch = a.batch;
    io.dims = parse_dims(a.dims);
    io.channels_last = a.layout == "nhwc";
    io.dtype = a.compute.dtype;
    io.out_dtype = a.compute.out_dtype.empty() ? "float16" : a.compute.out_dtype;
    table = import_onnx(a.model, io);
    if (table.workloads.empty()) bad(a.model, "no Conv, Gemm or MatMul node that tmap maps", "see 'tmap import " + a.model + "'");
  } else {
    table = load_workload_table(a.table);
    if (!a.compute.dtype.empty()) table.dtype = a.compute.dtype;
    if (!a.compute.out_dtype.empty()) table.out_dtype = a.compute.out_dtype;
  }
  for (const auto& u : table.unsupported) spdlog::warn("not tuned: {} ({}): {}", u.node, u.op_type, u.reason);
  return table;
}

/// Whether a progress line is due: on a terminal at every trial; else once per batch, and with
/// several GPUs (a line each) at most every 10 s.
struct ProgressPace {
  int last_trials = 0;
  double last_s = -1e9;
  bool due(const TuneArgs& a, bool tty, int trials, int total, double elapsed_s, std::size_t gpus) {
    if (trials == last_trials) return false;
    const bool last = trials == total;
    if (!tty && !last && (trials - last_trials < a.trials_per_batch || (gpus > 1 && elapsed_s - last_s < 10)))
      return false;
    last_trials = trials;
    last_s = elapsed_s;
    return true;
  }
};

/// The progress lines of a run: the total, then one per GPU when there are several.
std::vector<std::string> progress_lines(const char* total, const MeasurePool* gpus, double elapsed_s) {
  std::vector<std::string> lines{total};
  if (gpus && gpus->size() > 1)
    for (std::string& l : gpu_lines(*gpus, elapsed_s)) lines.push_back(std::move(l));
  return lines;
}

/// Prints the run's progress on stderr: rewritten in place on a terminal, a line per batch else.
std::function<void(const ModelProgress&)> progress_printer(const TuneArgs& a, ProgressBlock& block, bool tty) {
  return [&a, &block, tty, pace = ProgressPace{}](const ModelProgress& p) mutable {
    if (!pace.due(a, tty, p.trials, p.total_trials, p.elapsed_s, p.gpus ? p.gpus->size() : 1)) return;
    char line[512];
    std::snprintf(line, sizeof line, "[%5d%s] model %.2f us over %d/%d workloads | %s %s | %s elapsed, ~%s left",
                  p.trials, p.total_trials ? ("/" + std::to_string(p.total_trials)).c_str() : " trials", p.weighted_us,
                  p.with_kernel, p.tasks, p.task.c_str(),
                  p.task_best_us > 0 ? (std::to_string(p.task_best_us).substr(0, 7) + " us").c_str() : "(none yet)",
                  duration_text(p.elapsed_s).c_str(), duration_text(p.eta_s).c_str());
    block.show(progress_lines(line, p.gpus, p.elapsed_s));
  };
}

/// Without a GPU: each workload ranked by the analytic model, its share of the trials compiled.
ModelTuneSummary rank_model(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws,
                            const ModelTuneOptions& o, const Machine& m) {
  ModelTuneSummary s;
  spdlog::info("ranking with the analytic model for {} (no measurement)", m.target.arch);
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  // A time budget is shared by the workloads left; none starts once it is spent.
  const double budget = o.tune.time_budget_s;
  bool budget_reached = false;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const ModelTask& t = tasks[i];
    if (g_interrupted) break;
    if (budget > 0 && i > 0 && elapsed() >= budget) {
      budget_reached = true;
      break;
    }
    TuneOptions to = o.tune;
    if (budget > 0) to.time_budget_s = (budget - elapsed()) / static_cast<double>(tasks.size() - i);
    to.trials = std::max(1, (o.trials > 0 ? o.trials : 8 * static_cast<int>(tasks.size())) / static_cast<int>(tasks.size()));
    ModelTaskResult r;
    r.name = t.name;
    r.count = t.count;
    const Workload w = make_workload(*t.compute);
    r.key = w.key;
    r.flops = w.description["flops"].get<double>();
    r.summary = rank_with_model(*t.compute, hws, to);
    s.measured += r.summary.measured;
    s.tasks.push_back(r);
  }
  s.wall_s = elapsed();
  s.stopped = g_interrupted;
  s.stop_reason = s.stopped         ? "stopped by the user"
                  : budget_reached ? "time budget reached (ranked by the analytic model)"
                                   : "ranked by the analytic model";
  return s;
}

void print_model_json(const TuneArgs& a, const WorkloadTable& table, const ModelTuneSummary& s,
                      const std::string& log_path, const nlohmann::json& gpus, const nlohmann::json& ranges) {
  nlohmann::json j;
  j["title"] = table.title;
  j["log"] = log_path;
  j["measure"] = a.measure;
  j["trials"] = s.measured;
  j["transferred"] = s.transferred;
  j["wall_s"] = s.wall_s;
  j["stop_reason"] = s.stop_reason;
  j["weighted_us"] = a.measure == "model" ? nlohmann::json() : nlohmann::json(s.weighted_us());
  j["gpus"] = gpus;
  j["history"] = nlohmann::json::array();  // the model total as the run went
  for (const auto& [at, us] : s.history) j["history"].push_back({{"seconds", at}, {"weighted_us", us}});
  j["workloads"] = nlohmann::json::array();
  for (const auto& t : s.tasks) {
    const auto& b = t.summary.best;
    j["workloads"].push_back({{"name", t.name}, {"workload", t.key}, {"count", t.count}, {"gflop", t.flops / 1e9},
                              {"trials", t.summary.measured}, {"resumed", t.summary.resumed}, {"failed", t.summary.failed},
                              {"seeds", {{"offered", t.summary.offered}, {"tried", t.summary.seeded},
                                         {"improved", t.summary.seed_wins}}},
                              {"seconds", time_json(t.summary)},
                              {"best_us", b && b->result.ok() ? nlohmann::json(b->result.median_us) : nlohmann::json()},
                              {"best", b ? to_json(*b) : nlohmann::json()}});
  }
  j["ranges"] = ranges;
  std::cout << j.dump(2) << "\n";
}

void print_model_text(const TuneArgs& a, const WorkloadTable& table, const ModelTuneSummary& s,
                      const std::string& log_path) {
  const double total_flops = table.total_flops();
  std::printf("%s: %zu workloads, %.3f GFLOP per inference; %d trials %s in %s (%d earlier measurements "
              "warm-started the model); log %s\nstopped: %s\n",
              table.title.c_str(), s.tasks.size(), total_flops / 1e9, s.measured,
              a.measure == "model" ? "ranked and compiled" : "measured", duration_text(s.wall_s).c_str(), s.transferred,
              log_path.c_str(), s.stop_reason.c_str());
  if (a.measure != "model") {
    TuneSummary sum;
    for (const auto& t : s.tasks) sum.add_times(t.summary);
    std::printf("%s\n", time_text(sum).c_str());
    int tried = 0, improved = 0;
    for (const auto& t : s.tasks) tried += t.summary.seeded, improved += t.summary.seed_wins;
    std::printf("seeds (best schedules from the logs): %d tried, %d improved a workload's best\n", tried, improved);
    int confirmed = 0;
    double confirm_s = 0, once_us = 0, now_us = 0;
    for (const auto& t : s.tasks) {
      if (!t.summary.confirmed || !t.summary.best || !t.summary.best->result.ok()) continue;
      confirmed += t.summary.confirmed, confirm_s += t.summary.confirm_s;
      once_us += t.count * t.summary.unconfirmed_best_us, now_us += t.count * t.summary.best->result.median_us;
    }
    if (confirmed)
      std::printf("confirmed: each workload's fastest candidates measured again in rounds (%d in all, %.1f s); model "
                  "total %.2f us, %.2f us by single measurements\n",
                  confirmed, confirm_s, now_us, once_us);
  }
  std::printf("%-28s %-16s %5s %7s %8s %10s %9s %12s %7s  %s\n", "workload", "key", "count", "trials", "resumed",
              "best us", "TFLOP/s", "x count us", "time %", "kernel");
  const double total_us = s.weighted_us();
  for (const auto& t : s.tasks) {
    const auto& b = t.summary.best;
    const bool ok = b && b->result.ok();
    std::printf("%-28s %-16s %5d %7d %8d %10s %9s %12s %6s%%  %s\n", t.name.c_str(), t.key.c_str(), t.count,
                t.summary.measured, t.summary.resumed,
                ok ? std::to_string(b->result.median_us).substr(0, 8).c_str() : "-",
                ok ? std::to_string(tflops(*b)).substr(0, 6).c_str() : "-",
                ok ? std::to_string(t.count * b->result.median_us).substr(0, 9).c_str() : "-",
                ok && total_us > 0 ? std::to_string(100 * t.count * b->result.median_us / total_us).substr(0, 4).c_str() : "-",
                b ? candidate_label(b->candidate).c_str() : "(no kernel)");
  }
  if (a.measure != "model")
    std::printf("model total (sum of count x best): %.2f us, %.2f TFLOP/s%s\n", total_us,
                total_us > 0 ? total_flops / (total_us * 1e-6) / 1e12 : 0.0,
                std::any_of(s.tasks.begin(), s.tasks.end(), [](const ModelTaskResult& t) { return !t.summary.best || !t.summary.best->result.ok(); })
                    ? " (workloads without a kernel left out)" : "");
}

/// The same workloads against cuDNN and cuBLAS, timed by tmap_bench beside this binary.
void run_model_baselines(const TuneArgs& a, const WorkloadTable& table, const std::string& log_path) {
  std::string table_path = a.table;
  const std::filesystem::path bench = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "tmap_bench";
  if (!std::filesystem::exists(bench)) {
    spdlog::info("no tmap_bench beside tmap (built without cuDNN?): no cuDNN/cuBLAS comparison");
    return;
  }
  if (table_path.empty()) {
    table_path = (std::filesystem::temp_directory_path() / ("tmap_model_" + std::to_string(::getpid()) + ".json")).string();
    std::ofstream(table_path) << workload_table_json(table);
  }
  std::fflush(stdout);
  const std::string cmd = "'" + bench.string() + "' --table '" + table_path + "' --log '" + log_path + "'" +
                          (a.format == "json" ? " >&2" : "");
  std::fprintf(stderr, "timing cuDNN / cuBLAS on the same workloads: %s\n", cmd.c_str());
  const int rc = std::system(cmd.c_str());
  if (!a.model.empty()) std::filesystem::remove(table_path);
  if (rc != 0) spdlog::warn("tmap_bench failed (status {}); the tuning results above stand", rc);
}

/// Tunes a table's range workloads (workload_table.h), each on its own with `share` of the
/// table's budget; prints each summary as text, or returns them for the JSON document.
nlohmann::json tune_table_ranges(const TuneArgs& a, const WorkloadTable& table, std::size_t whole, Machine& m,
                                 const std::string& log_path, double budget_s);

/// The workloads of one shape of a table (or model), tuned together under `budget_s` (0: by
/// trials), and the summary printed with the ranges' (`ranges`, JSON only).
void tune_fixed_workloads(const TuneArgs& a, const WorkloadTable& table, std::size_t whole, Machine& m,
                          const std::string& log_path, double budget_s, const nlohmann::json& ranges) {
  std::vector<Compute> computes;
  computes.reserve(table.workloads.size());
  for (const auto& w : table.workloads) computes.push_back(build_table_workload(w, table.dtype, table.out_dtype, "workload '" + w.name + "'"));
  std::vector<ModelTask> tasks;
  for (std::size_t i = 0; i < computes.size(); ++i) tasks.push_back({table.workloads[i].name, &computes[i], table.workloads[i].count});

  const std::vector<HwAbstraction> hws = a.hw.chosen(a.hw.all());
  ModelTuneOptions o;
  o.tune = tune_options(a, m, log_path);
  o.time_budget_s = budget_s;
  // --trials are the whole table's: a shard measures its workloads' share of them.
  const int given = a.trials_option->count() ? std::max(1, static_cast<int>(a.trials * tasks.size() / whole)) : 0;
  o.trials = given ? given : budget_s > 0 ? 0 : 64 * static_cast<int>(tasks.size());
  const bool tty = ::isatty(STDERR_FILENO);
  ProgressBlock block(tty);
  o.on_progress = progress_printer(a, block, tty);
  ModelTuneSummary s;
  TuneGpus gpus;
  {
    StopOnSignals stop_on_signals;
    if (a.measure == "model") {
      s = rank_model(tasks, hws, o, m);
    } else {
      gpus = open_gpus(m.gpus, a.timeout, a.measure_ms, o.tune.seed);
      s = tune_model(tasks, hws, o, *gpus.pool);
    }
  }
  block.end();
  if (g_signal) exit_status() = 128 + g_signal;
  double compile_wait = 0;
  for (const ModelTaskResult& t : s.tasks) compile_wait += t.summary.compile_wait_s;
  if (a.format == "json") {
    print_model_json(a, table, s, log_path, gpus.pool ? gpu_summary_json(gpus, s.wall_s, compile_wait) : nlohmann::json(),
                     ranges);
  } else {
    print_model_text(a, table, s, log_path);
    if (gpus.pool) print_gpu_summary(gpus, s.wall_s, compile_wait);
  }
}

/// `tmap tune --model M.onnx` / `--table T.json`: every unique workload under one budget. A
/// table's ranges of sizes are tuned first, each with its workload's share of the budget.
void tune_model_command(const TuneArgs& a) {
  WorkloadTable table = load_model_table(a);
  const std::size_t whole = table.workloads.size();
  if (!a.shard.empty()) keep_shard(table, parse_shard(a.shard));
  if (table.workloads.empty()) {  // more shards than workloads: this one has nothing to do
    std::printf("%s: no workload in this shard\n", table.title.c_str());
    return;
  }
  Machine m = detect(a.arch, a.gpus);
  check_measurable(a, m);
  const std::string stem = std::filesystem::path(a.model.empty() ? a.table : a.model).stem().string();
  const std::string log_path = a.log.empty() ? "logs/" + stem + ".jsonl" : a.log;
  const double per_workload_s = a.time_budget / static_cast<double>(table.workloads.size());
  WorkloadTable fixed = table;
  std::erase_if(fixed.workloads, [](const TableWorkload& w) { return w.ranged(); });
  const nlohmann::json ranges = tune_table_ranges(a, table, whole, m, log_path, per_workload_s);
  if (!fixed.workloads.empty() && !g_signal)
    tune_fixed_workloads(a, fixed, whole, m, log_path, per_workload_s * fixed.workloads.size(), ranges);
  else if (a.format == "json")
    std::cout << nlohmann::json{{"title", table.title}, {"log", log_path}, {"ranges", ranges}}.dump(2) << "\n";
  if (a.measure == "model" || a.no_baselines || g_signal) return;
  run_model_baselines(a, table, log_path);
}

/// Prints a tuning run's progress on stderr: one line rewritten on a terminal, a line per batch else.
std::function<void(const TuneProgress&)> tune_progress_printer(const TuneArgs& args, ProgressBlock& block, bool tty) {
  return [&args, &block, tty, pace = ProgressPace{}](const TuneProgress& p) mutable {
    if (!pace.due(args, tty, p.trials, p.total, p.elapsed_s, p.gpus ? p.gpus->size() : 1)) return;
    char line[512];
    std::snprintf(line, sizeof line, "[%4d%s] best %s | %s | model %s | %s elapsed, ~%s left", p.trials,
                  p.total ? ("/" + std::to_string(p.total)).c_str() : " trials",
                  p.best_us > 0 ? (std::to_string(p.best_us).substr(0, 7) + " us, " +
                                   std::to_string(p.best_tflops).substr(0, 6) + " TFLOP/s").c_str()
                                : "none yet",
                  p.arm.c_str(),
                  p.model_trained ? ("rho " + std::to_string(p.rank_correlation).substr(0, 5)).c_str() : "analytic",
                  duration_text(p.elapsed_s).c_str(), duration_text(p.eta_s).c_str());
    block.show(progress_lines(line, p.gpus, p.elapsed_s));
  };
}

void print_tune_json(const TuneArgs& args, const TuneSummary& s, const Compute& c, const Workload& w,
                     const std::string& log_path, const nlohmann::json& gpus) {
  nlohmann::json j;
  j["workload"] = {{"key", w.key}, {"name", c.name}, {"statement", c.statement_text()}};
  if (!c.epilogue.empty()) j["workload"]["epilogue"] = c.epilogue_text();
  j["log"] = log_path;
  j["measure"] = args.measure;
  j["mappings"] = s.arms;
  j["first_looks"] = s.first_looks;
  j["trials"] = s.measured;
  j["failed"] = s.failed;
  j["resumed"] = s.resumed;
  j["transferred"] = s.transferred;
  j["seeds"] = {{"offered", s.offered}, {"tried", s.seeded}, {"improved", s.seed_wins}};
  j["confirm"] = {{"candidates", s.confirmed}, {"best_measured_once_us", s.unconfirmed_best_us},
                  {"seconds", s.confirm_s}};
  j["wall_s"] = s.wall_s;
  j["stop_reason"] = s.stop_reason;
  j["seconds"] = time_json(s);
  j["gpus"] = gpus;
  j["signal"] = g_signal ? nlohmann::json(static_cast<int>(g_signal)) : nlohmann::json();
  j["rank_correlations"] = s.rank_correlations;
  j["history"] = nlohmann::json::array();
  for (const auto& [trial, us] : s.history) j["history"].push_back({{"trials", trial}, {"best_us", us}});
  j["best"] = s.best ? to_json(*s.best) : nlohmann::json();
  if (s.best && s.best->result.ok()) j["best_tflops"] = tflops(*s.best);
  std::cout << j.dump(2) << "\n";
}

/// `tmap tune`: one compute (or, with --model or --table, a model's workloads).
/// --batch is the model's batch, as in tmap import. Its spellings of old keep working for now:
/// --model-batch, and --batch without --model or --table, which set the trials per batch.
void resolve_batch_options(TuneArgs& a) {
  if (a.model_batch) {
    if (a.batch) bad("--model-batch", "is the old spelling of --batch, and both are given", "drop --model-batch");
    spdlog::warn("--model-batch is deprecated: use --batch");
    a.batch = a.model_batch;
  }
  if (a.batch && a.model.empty() && a.table.empty()) {
    if (a.batch > 1024) bad("--batch", "must be at most 1024 trials per batch (got " + std::to_string(a.batch) + ")",
                            "give --trials-per-batch N; --batch is the model's batch with --model");
    spdlog::warn("--batch without --model sets the trials per batch, a deprecated spelling: use --trials-per-batch");
    a.trials_per_batch = static_cast<int>(a.batch);
    a.per_batch_given = true;
    a.batch = 0;
  }
}

void print_range_summary(const RangeTuneSummary& s, const Compute& c, const std::string& log_path) {
  const std::string& param = c.dynamic.param;
  std::printf("range %s=%lld..%lld of %s: %zu samples tuned in %s, %d kernels of the range measured across them "
              "(%d measurements, %d failed) in %s (%s); log %s\n",
              param.c_str(), (long long)c.dynamic.lo, (long long)c.dynamic.hi, c.name.c_str(), s.points.size(),
              duration_text(s.tune_s).c_str(), s.candidates, s.measurements, s.failed, duration_text(s.cross_s).c_str(),
              phases_text(s.cross_phases).c_str(), log_path.c_str());
  std::printf("samples: %d trials (setting up %.1f s, ending %.1f s, of which %.1f s awaiting compiles); %s\n",
              s.sample_trials, s.sample_setup_s, s.sample_finish_s, s.sample_finish_compile_s,
              time_text(s.sample_times).c_str());
  std::printf("%-12s %-10s %-10s %s\n", "bucket", "worst", "at", "kernel");
  for (const RangeBucket& b : s.buckets)
    std::printf("%5lld-%-6lld %-10.3f %-10lld %s %s\n", (long long)b.lo, (long long)b.hi, b.worst_ratio,
                (long long)b.worst_size, candidate_label(b.candidate).c_str(), to_json(b.candidate.params).dump().c_str());
  std::printf("%-8s %12s %14s %8s\n", param.c_str(), "own us", "dispatched us", "ratio");
  for (const RangePoint& p : s.points)
    std::printf("%-8lld %12.2f %14.2f %8.3f\n", (long long)p.size, p.tuned_us, p.dispatched_us,
                p.tuned_us > 0 ? p.dispatched_us / p.tuned_us : 0.0);
  for (std::int64_t size : s.unserved) std::printf("no kernel of the range ran correctly at %s=%lld\n", param.c_str(), (long long)size);
  if (s.skipped > 0)
    std::printf("the time budget ended the measuring across the range: %d measurements at neighbouring samples left "
                "out (a larger --time-budget measures them)\n",
                s.skipped);
  if (s.beyond_budget > 0)
    std::printf("to keep to --max-buckets, %d measurements at neighbouring samples were made after the time budget\n",
                s.beyond_budget);
  if (s.over_cap)
    std::printf("more buckets than --max-buckets: no kernel measured runs across fewer (each is measured within %d "
                "samples of those it came from; give a larger --max-buckets)\n", static_cast<int>(kRangeReach));
}

nlohmann::json range_summary_json(const RangeTuneSummary& s, const Compute& c, const std::string& log_path) {
  nlohmann::json buckets = nlohmann::json::array(), points = nlohmann::json::array();
  for (const RangeBucket& b : s.buckets)
    buckets.push_back({{"lo", b.lo}, {"hi", b.hi}, {"kernel", candidate_label(b.candidate)},
                       {"params", to_json(b.candidate.params)}, {"worst_ratio", b.worst_ratio},
                       {"worst_size", b.worst_size}, {"worst_us", b.worst_us}});
  for (const RangePoint& p : s.points)
    points.push_back({{"size", p.size}, {"tuned_us", p.tuned_us}, {"dispatched_us", p.dispatched_us}});
  return {{"workload", make_workload(c).key}, {"name", c.name},
          {"range", {{"param", c.dynamic.param}, {"lo", c.dynamic.lo}, {"hi", c.dynamic.hi}}},
          {"log", log_path}, {"buckets", buckets}, {"samples", points}, {"unserved", s.unserved},
          {"candidates", s.candidates}, {"measurements", s.measurements}, {"failed", s.failed},
          {"skipped", s.skipped}, {"beyond_budget", s.beyond_budget}, {"over_cap", s.over_cap}, {"tune_s", s.tune_s},
          {"measure_s", s.cross_s}, {"measure_phases", phases_json(s.cross_phases)}, {"wall_s", s.wall_s},
          {"sample_trials", s.sample_trials}, {"sample_time", time_json(s.sample_times)},
          {"sample_setup_s", s.sample_setup_s}, {"sample_finish_s", s.sample_finish_s},
          {"sample_finish_compile_s", s.sample_finish_compile_s}};
}

/// Tunes one range of sizes on the machine's GPUs.
RangeTuneSummary run_range(const TuneArgs& args, const Compute& c, const std::vector<HwAbstraction>& hws, Machine& m,
                           const RangeTuneOptions& o) {
  StopOnSignals stop_on_signals;
  TuneGpus gpus = open_gpus(m.gpus, args.timeout, args.measure_ms, o.tune.seed);
  WorkerMeasurer& first = *gpus.measurers.front();
  RangeTuneSummary s = tune_range(c, hws, o, *gpus.pool, [&](const Compute& range, std::int64_t size, int workspace,
                                                             const ImplicitGemm& g, const ScheduleParams&,
                                                             const KernelSource& k, const CompileResult& b) {
    return first.measure_at(range, size, g, k, b, workspace);
  });
  if (g_signal) exit_status() = 128 + g_signal;
  return s;
}

/// How a range is tuned from `a`'s options: into `log`, at the samples `sizes` (sorted; empty:
/// the tuner's own), within --loss and --max-buckets; a time budget alone leaves the trials
/// unbounded, as for a model.
RangeTuneOptions range_options(const TuneArgs& a, Machine& m, const std::string& log, std::vector<std::int64_t> sizes) {
  RangeTuneOptions o;
  o.tune = tune_options(a, m, log);
  if (a.time_budget > 0 && !a.trials_option->count()) o.tune.trials = 0;
  o.loss = a.loss;
  o.max_buckets = a.max_buckets;
  o.sizes = std::move(sizes);
  std::sort(o.sizes.begin(), o.sizes.end());
  return o;
}

/// `tmap tune` of a range of sizes (range_tuner.h), on the GPU.
void tune_range_command(const TuneArgs& args, const Compute& c, const std::vector<HwAbstraction>& hws, Machine& m) {
  if (args.measure == "model")
    bad("--measure model", "a range of sizes is tuned by measuring its kernels", "drop --measure model, or give one size");
  if (!args.emit_cuda.empty())
    bad("--emit-cuda", "a range of sizes has a kernel per bucket", "write them with tmap export LOG --out DIR");
  const RangeTuneOptions o =
      range_options(args, m, args.log.empty() ? "logs/" + c.name + ".jsonl" : args.log, args.sizes);
  for (std::int64_t size : o.sizes)
    if (size < c.dynamic.lo || size > c.dynamic.hi)
      bad("--sizes", std::to_string(size) + " is outside the range " + std::to_string(c.dynamic.lo) + ".." +
                         std::to_string(c.dynamic.hi), "give sizes within the range");
  const RangeTuneSummary s = run_range(args, c, hws, m, o);
  if (args.format == "json") std::cout << range_summary_json(s, c, o.tune.log_path).dump(2) << "\n";
  else print_range_summary(s, c, o.tune.log_path);
  if (s.buckets.empty() && !g_signal) throw std::runtime_error("tuning the range found no correct kernel");
}

nlohmann::json tune_table_ranges(const TuneArgs& a, const WorkloadTable& table, std::size_t whole, Machine& m,
                                 const std::string& log_path, double budget_s) {
  nlohmann::json out = nlohmann::json::array();
  const std::vector<HwAbstraction> hws = a.hw.chosen(a.hw.all());
  for (const TableWorkload& w : table.workloads) {
    if (!w.ranged() || g_signal) continue;
    if (a.measure == "model") {
      spdlog::warn("workload '{}' is a range of sizes, tuned by measuring its kernels: left out of --measure model",
                   w.name);
      continue;
    }
    const Compute c = build_table_workload(w, table.dtype, table.out_dtype, "workload '" + w.name + "'");
    RangeTuneOptions o = range_options(a, m, log_path, w.sizes);
    o.tune.time_budget_s = budget_s;
    // --trials are the whole table's, shared by its workloads; a time budget alone leaves them unbounded.
    if (a.trials_option->count()) o.tune.trials = std::max(1, static_cast<int>(a.trials / whole));
    else if (budget_s > 0) o.tune.trials = 0;
    const RangeTuneSummary s = run_range(a, c, hws, m, o);
    if (a.format == "json") out.push_back(range_summary_json(s, c, log_path));
    else print_range_summary(s, c, log_path);
    if (s.buckets.empty() && !g_signal) spdlog::warn("workload '{}': tuning the range found no correct kernel", w.name);
  }
  return out;
}

/// A one-workload run's end: the best kernel's source where --emit-cuda asks, and the summary.
void report_tune(const TuneArgs& args, const TuneSummary& s, const Compute& c, const std::vector<HwAbstraction>& hws,
                 int cc, const std::string& log_path, const TuneGpus& gpus) {
  if (!args.emit_cuda.empty() && s.best) {
    Regenerated r = regenerate(*s.best, hws, cc);
    write_file(args.emit_cuda, self_contained(r.kernel.code), "--emit-cuda");
  }
  const Workload w = make_workload(c);
  if (args.format == "json") {
    print_tune_json(args, s, c, w, log_path, gpus.pool ? gpu_summary_json(gpus, s.wall_s, s.compile_wait_s) : nlohmann::json());
  } else {
    print_tune_summary(s, c, w, log_path, args.measure == "model");
    if (gpus.pool) print_gpu_summary(gpus, s.wall_s, s.compile_wait_s);
  }
}

void tune_command(TuneArgs& args) {
  resolve_batch_options(args);
  if (!args.shard.empty() && args.model.empty() && args.table.empty())
    bad("--shard", "only applies to --model or --table", "shard a model's workloads, or tune the one compute whole");
  if (!args.model.empty() || !args.table.empty()) return tune_model_command(args);
  Compute c = args.compute.build();
  // They shape a range's buckets: given for one shape, they would be ignored without a word.
  for (const CLI::Option* o : args.range_options)
    if (!c.dynamic.active() && o->count())
      bad(o->get_name(), "applies to a range of sizes, and " + c.name + " has one shape",
          "give a range, e.g. --set M=1..256, or drop " + o->get_name());
  const std::vector<HwAbstraction> hws = args.hw.chosen(args.hw.all());
  Machine m = detect(args.arch, args.gpus);
  const bool model_only = args.measure == "model";
  check_measurable(args, m);
  if (c.dynamic.active()) return tune_range_command(args, c, hws, m);
  TuneOptions o = tune_options(args, m, args.log.empty() ? "logs/" + c.name + ".jsonl" : args.log);
  if (!model_only && args.time_budget > 0 && !args.trials_option->count()) o.trials = 0;  // the budget bounds it
  const bool tty = ::isatty(STDERR_FILENO);
  ProgressBlock block(tty);
  o.on_progress = tune_progress_printer(args, block, tty);
  TuneSummary s;
  TuneGpus gpus;
  {
    StopOnSignals stop_on_signals;
    if (model_only) {
      spdlog::info("ranking with the analytic model for {} (no measurement)", m.target.arch);
      s = rank_with_model(c, hws, o);
    } else {
      gpus = open_gpus(m.gpus, args.timeout, args.measure_ms, o.seed);
      s = tune(c, hws, o, *gpus.pool);
    }
  }
  block.end();
  // Interrupted: the summary is printed, then the conventional status of death by that signal.
  if (g_signal) exit_status() = 128 + g_signal;
  report_tune(args, s, c, hws, m.cc, o.log_path, gpus);
  if (!s.best && !model_only && !g_signal) throw std::runtime_error("tuning found no correct kernel");
}

/// The search: its budget, batches, logs, priors, measuring and seed.
void add_search_options(CLI::App* cmd, TuneArgs* args) {
  cmd->add_option("--trials", args->trials, "Candidates to measure (default 200, or what --time-budget allows where given; with --model or --table, in all, 64 per workload by default, a --shard its share)")->check(at_least(1));
  cmd->add_option("--time-budget", args->time_budget, "Stop after this many seconds")->check(at_least(0));
  cmd->add_option("--early-stop", args->early_stop, "Stop after this many trials without improvement (0: never)")
      ->check(at_least(0));
  cmd->add_option("--confirm", args->confirm,
                  "At the end, measure this many of the fastest candidates again, 3 rounds in turn, and keep the "
                  "fastest of those (default 4; 0: off)")
      ->check(between(0, 64));
  args->trials_per_batch_option = cmd->add_option("--trials-per-batch", args->trials_per_batch,
                                                  "Candidates compiled and measured per batch (default 16 per GPU)")
      ->check(between(1, 1024));
  cmd->add_option("--compile-ahead", args->compile_ahead,
                  "Batches compiled ahead of the one being measured (default 3; NVRTC bounds the trial rate)")
      ->check(between(1, 16));
  cmd->add_option("--log", args->log, "JSON-lines log to append to; its records of this workload resume the search "
                                      "(default logs/<op>.jsonl)");
  cmd->add_option("--prior", args->prior, "Also warm-start from this log: the cost model from its measurements of this architecture, and each workload by first measuring its own fastest schedules there (repeatable)")
      ->allow_extra_args(false)
      ->check(CLI::ExistingFile);
  cmd->add_option("--measure", args->measure, "gpu: measure on the GPU; model: rank with the analytic model only "
                                              "(no GPU needed; records are marked unmeasured)")
      ->check(CLI::IsMember({"gpu", "model"}));
  cmd->add_option("--arch", args->arch, "Target sm_XX (default: the GPU's; sm_90 without a GPU)");
  cmd->add_option("--enumerate", args->enumerate, "Mappings: amos (AMOS's rule, default) or all")
      ->check(CLI::IsMember({"amos", "all"}));
  cmd->add_option("--seed", args->seed, "Random seed (default: random)");
  cmd->add_option("--timeout", args->timeout, "Seconds before a hanging kernel is stopped (default 10)");
  cmd->add_option("--measure-ms", args->measure_ms,
                  "Time each candidate for at least this many milliseconds of runs (default 3)")
      ->check(at_least(1));
}

/// With a range of sizes: the loss, the cap on kernels and the samples.
void add_range_options(CLI::App* cmd, TuneArgs* args) {
  cmd->add_option("--loss", args->loss,
                  "With a range of sizes (--set M=1..256): each bucket's kernel is within this fraction of the "
                  "best at every sample it serves (default 0.05)")
      ->check(between(0, 1));
  cmd->add_option("--max-buckets", args->max_buckets,
                  "With a range of sizes: at most this many kernels; where the loss needs more, those whose worst "
                  "ratio to the best is lowest, measuring what --time-budget left out if need be (default 0: as "
                  "many as the loss needs)")
      ->check(at_least(0));
  cmd->add_option("--sizes", args->sizes,
                  "With a range of sizes: the samples tuned (default: powers of two and their midpoints; the range's "
                  "ends are always among them); --trials and --time-budget are shared by all")
      ->delimiter(',');
}

/// A whole model or table: which one, its shard, GPUs, symbolic dimensions and baselines.
void add_model_options(CLI::App* cmd, TuneArgs* args) {
  auto* model = cmd->add_option("--model", args->model, "Tune every unique workload of this ONNX model (see 'tmap import') "
                                                        "under one budget: --trials in all (default 64 per workload) "
                                                        "or --time-budget");
  auto* table = cmd->add_option("--table", args->table, "The same for a workload table ('tmap import --format json')");
  cmd->add_option("--shard", args->shard,
                  "With --model or --table: tune only shard I/N of the workloads, balanced by estimated cost; 'auto' "
                  "in a Slurm array job, 'auto/N' in a Kubernetes Indexed Job (docs/scale.md)");
  model->excludes(table);
  cmd->add_option("--gpus", args->gpus,
                  "GPUs to measure on, all at once: 'all' (default: every visible one; CUDA_VISIBLE_DEVICES narrows "
                  "them) or indices such as 0,2. They must be of one model; confirmations run on the first");
  cmd->add_option("--batch", args->batch, "With --model: the value of its symbolic batch dimension (as in tmap import)")
      ->check(at_least(1));
  cmd->add_option("--model-batch", args->model_batch, "Deprecated spelling of --batch")->check(at_least(1));
  cmd->add_option("--dim", args->dims, "With --model: NAME=VALUE for a symbolic input dimension (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--layout", args->layout, "With --model: 2-D convolutions as nchw (default) or nhwc")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_flag("--no-baselines", args->no_baselines,
                "With --model or --table: skip timing cuDNN/cuBLAS with tmap_bench after tuning");
}

void register_tune(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand("tune", "Search mappings and schedules for the fastest kernel, logging every trial");
  args->compute.add_to(*cmd);
  args->hw.add_to(*cmd, "Only these abstractions (repeatable; default: every one that matches)");
  add_search_options(cmd, args.get());
  add_range_options(cmd, args.get());
  cmd->add_option("--emit-cuda", args->emit_cuda, "Write the best kernel's CUDA source to this file");
  cmd->add_option("--cache-dir", args->cache_dir, "Keep compiled binaries in this directory across runs");
  cmd->add_option("--format", args->format, "The summary as text or json (one document on stdout)")
      ->check(CLI::IsMember({"text", "json"}));
  add_model_options(cmd, args.get());
  args->trials_option = cmd->get_option("--trials");
  for (const char* name : {"--loss", "--max-buckets", "--sizes"}) args->range_options.push_back(cmd->get_option(name));
  cmd->callback([args] { tune_command(*args); });
}

}  // namespace

Machine detect(const std::string& arch, const std::string& gpus) {
  Machine m;
  m.rt = query_runtime();
  m.has_gpu = !m.rt.devices.empty();
  if (m.has_gpu) m.gpus = gpus.empty() ? std::vector<DeviceInfo>{m.rt.devices.front()} : choose_gpus(gpus, m.rt.devices);
  if (!arch.empty()) m.cc = parse_arch(arch);
  else if (m.has_gpu) m.cc = m.gpus.front().compute_capability;
  else m.cc = 90;
  const bool on_gpu = m.has_gpu && m.gpus.front().compute_capability == m.cc;
  m.limits = DeviceLimits::for_arch(m.cc);
  if (on_gpu) m.limits.sm_count = m.gpus.front().sm_count;
  m.model = DeviceModel::for_arch(m.cc, on_gpu ? m.gpus.front().sm_count : 0);
  m.target = {"sm_" + std::to_string(m.cc), on_gpu ? m.gpus.front().name : "",
              cuda_version_text(m.rt.driver_version), cuda_version_text(m.rt.runtime_version), TMAP_VERSION};
  return m;
}

void register_tuning(CLI::App& app) {
  register_tune(app);
  register_replay(app);
  register_logs(app);
  register_export(app);
}

}  // namespace tmap::cli
