// `tmap tune`: the search for the best kernel of one compute, the options and state its three
// modes share (tune_args.h; a range of sizes in tune_range.cpp, a model or table in
// tune_model.cpp), and the registration of the tuning commands (replay, logs and export live in
// cmd_replay.cpp and cmd_logs.cpp).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tmap/codegen/device_library.h"
#include "tmap/export/export.h"
#include "tmap/runtime/device.h"
#include "tmap/support/files.h"
#include "tmap/tune/cost_model.h"
#include "tmap/tune/tuner.h"
#include "tune_args.h"
#include "tune_gpus.h"

namespace tmap::cli {
namespace {

std::atomic<bool> g_interrupted{false};
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  g_interrupted.store(true);
}

}  // namespace

StopOnSignals::StopOnSignals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopOnSignals::~StopOnSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

const std::atomic<bool>& stop_requested() { return g_interrupted; }
int stop_signal() { return g_signal; }
void exit_status_after_signal() {
  if (g_signal) exit_status() = 128 + g_signal;
}

std::string phases_text(const MeasurePhases& w) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "in the worker: inputs %.1f, references %.1f, loading %.1f, first run and check %.1f, timing %.1f, "
                "other %.1f; awaiting reference compiles %.1f; files and pipes %.1f",
                w.inputs, w.reference, w.load, w.check, w.time, w.other, w.reference_wait, w.exchange);
  return buf;
}
nlohmann::json phases_json(const MeasurePhases& w) {
  return {{"inputs", w.inputs}, {"reference", w.reference}, {"load", w.load},
          {"check", w.check},   {"time", w.time},           {"other", w.other},
          {"reference_wait", w.reference_wait}, {"exchange", w.exchange}};
}

std::string time_text(const TuneSummary& s) {
  char buf[640];
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

void check_measurable(const TuneArgs& a, const Machine& m) {
  if (a.measure == "model") return;
  if (!m.has_gpu)
    bad("tmap tune", "no GPU to measure on: " + m.rt.status,
        "add --measure model to rank candidates with the analytic model and check that they compile");
  if (m.cc != m.gpus.front().compute_capability)
    bad("--arch", "sm_" + std::to_string(m.cc) + " is not the GPU's architecture", "drop --arch, or add --measure model");
}

bool ProgressPace::due(const TuneArgs& a, bool tty, int trials, int total, double elapsed_s, std::size_t gpus) {
  if (trials == last_trials) return false;
  const bool last = trials == total;
  if (!tty && !last && (trials - last_trials < a.trials_per_batch || (gpus > 1 && elapsed_s - last_s < 10)))
    return false;
  last_trials = trials;
  last_s = elapsed_s;
  return true;
}

std::vector<std::string> progress_lines(const char* total, const MeasurePool* gpus, double elapsed_s) {
  std::vector<std::string> lines{total};
  if (gpus && gpus->size() > 1)
    for (std::string& l : gpu_lines(*gpus, elapsed_s)) lines.push_back(std::move(l));
  return lines;
}

namespace {

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
  j["signal"] = stop_signal() ? nlohmann::json(static_cast<int>(stop_signal())) : nlohmann::json();
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
  if (args.objective != "total" && args.model.empty() && args.table.empty())
    bad("--objective", "only applies to --model or --table", "tune a model's or a table's workloads, or drop --objective");
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
  if (!model_only && args.time_budget > 0 && !args.trials_given) o.trials = 0;  // the budget bounds it
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
  exit_status_after_signal();
  report_tune(args, s, c, hws, m.cc, o.log_path, gpus);
  if (!s.best && !model_only && !stop_signal()) throw std::runtime_error("tuning found no correct kernel");
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
  cmd->add_option("--objective", args->objective,
                  "With --model or --table: what the trials go to lower: 'total', the sum of count x time (a model's "
                  "workloads; default), or 'geomean', the workloads' geometric mean (a benchmark table's rows, each "
                  "its own problem: a short row gets trials beside a long one)")
      ->check(CLI::IsMember({"total", "geomean"}));
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
  cmd->callback([args] {
    args->trials_given = args->trials_option->count() > 0;
    tune_command(*args);
  });
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
