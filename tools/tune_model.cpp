// `tmap tune --model M.onnx` / `--table T.json`: a model's or table's unique workloads tuned
// under one budget, its ranges of sizes first, then cuDNN and cuBLAS timed on the same workloads.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "tmap/frontend/onnx_import.h"
#include "tmap/frontend/workload_table.h"
#include "tmap/tune/model_tuner.h"
#include "tmap/tune/shards.h"
#include "tune_args.h"
#include "tune_gpus.h"

namespace tmap::cli {
namespace {

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
    if (stop_requested()) break;
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
  s.stopped = stop_requested();
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
  o.objective = a.objective == "geomean" ? TuneObjective::kGeomean : TuneObjective::kTotal;
  // --trials are the whole table's: a shard measures its workloads' share of them.
  const int given = a.trials_given ? std::max(1, static_cast<int>(a.trials * tasks.size() / whole)) : 0;
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
  exit_status_after_signal();
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

}  // namespace

/// Every unique workload under one budget. A table's ranges of sizes are tuned first, each with
/// its workload's share of the budget.
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
  if (!fixed.workloads.empty() && !stop_signal())
    tune_fixed_workloads(a, fixed, whole, m, log_path, per_workload_s * fixed.workloads.size(), ranges);
  else if (a.format == "json")
    std::cout << nlohmann::json{{"title", table.title}, {"log", log_path}, {"ranges", ranges}}.dump(2) << "\n";
  if (a.measure == "model" || a.no_baselines || stop_signal()) return;
  run_model_baselines(a, table, log_path);
}

}  // namespace tmap::cli
