// `tmap tune` of a range of sizes (`--set M=1..256`, or a table's range workloads): the samples
// tuned, the buckets chosen across them (range_tuner.h), and their summaries.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "tmap/tune/range_tuner.h"
#include "tune_args.h"
#include "tune_gpus.h"

namespace tmap::cli {
namespace {

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
  exit_status_after_signal();
  return s;
}

/// How a range is tuned from `a`'s options: into `log`, at the samples `sizes` (sorted; empty:
/// the tuner's own), within --loss and --max-buckets; a time budget alone leaves the trials
/// unbounded, as for a model.
RangeTuneOptions range_options(const TuneArgs& a, Machine& m, const std::string& log, std::vector<std::int64_t> sizes) {
  RangeTuneOptions o;
  o.tune = tune_options(a, m, log);
  if (a.time_budget > 0 && !a.trials_given) o.tune.trials = 0;
  o.loss = a.loss;
  o.max_buckets = a.max_buckets;
  o.sizes = std::move(sizes);
  std::sort(o.sizes.begin(), o.sizes.end());
  return o;
}

}  // namespace

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
  if (s.buckets.empty() && !stop_signal()) throw std::runtime_error("tuning the range found no correct kernel");
}

nlohmann::json tune_table_ranges(const TuneArgs& a, const WorkloadTable& table, std::size_t whole, Machine& m,
                                 const std::string& log_path, double budget_s) {
  nlohmann::json out = nlohmann::json::array();
  const std::vector<HwAbstraction> hws = a.hw.chosen(a.hw.all());
  for (const TableWorkload& w : table.workloads) {
    if (!w.ranged() || stop_signal()) continue;
    if (a.measure == "model") {
      spdlog::warn("workload '{}' is a range of sizes, tuned by measuring its kernels: left out of --measure model",
                   w.name);
      continue;
    }
    const Compute c = build_table_workload(w, table.dtype, table.out_dtype, "workload '" + w.name + "'");
    RangeTuneOptions o = range_options(a, m, log_path, w.sizes);
    o.tune.time_budget_s = budget_s;
    // --trials are the whole table's, shared by its workloads; a time budget alone leaves them unbounded.
    if (a.trials_given) o.tune.trials = std::max(1, static_cast<int>(a.trials / whole));
    else if (budget_s > 0) o.tune.trials = 0;
    const RangeTuneSummary s = run_range(a, c, hws, m, o);
    if (a.format == "json") out.push_back(range_summary_json(s, c, log_path));
    else print_range_summary(s, c, log_path);
    if (s.buckets.empty() && !stop_signal()) spdlog::warn("workload '{}': tuning the range found no correct kernel", w.name);
  }
  return out;
}

}  // namespace tmap::cli
