// `tmap tune`: finds the best mapping and schedule of one compute over every matching
// abstraction, measuring on the GPU, recording every result to a JSON-lines log.
//
// The search runs in batches. Mappings (arms) share the trials by how good they have proven:
// every arm gets a first look (its best candidate by the model; when there are more arms than a
// quarter of the trials, the model's best arms get it; after the first batch, first looks take
// at most half of each batch), and the other slots go to arms in
// proportion to a share that follows each arm's best time relative to the best overall, with
// momentum, so hopeless mappings stop costing trials. The cost model starts from the correct
// measurements of other workloads in the log (and prior logs) when there are any. Within an arm, candidates come from
// evolution: a pool of mutations and crossovers of the arm's best measured schedules plus fresh
// samples, ranked by the cost model; each batch mixes the model's top picks with a fraction of
// random picks from the pool. Other workloads' fastest schedules (in the logs, and in
// model-level tuning each workload's new bests) are seeds: where one fits this space (the same
// mapping by iterator names, a valid schedule) it is tried early, at most a quarter of a batch.
// The next batch is compiled on all cores (in compile-worker processes, see use_compile_workers)
// while the current one is measured, a candidate at a time on each GPU of the pool, each GPU's
// in its own isolated worker (measure_pool.h).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/support/files.h"
#include "tmap/tune/features.h"
#include "tmap/tune/measure_pool.h"
#include "tmap/tune/search_space.h"
#include "tmap/tune/tune_log.h"

namespace tmap {

/// How the tuner and `tmap replay` time candidates: two warm-up runs, then CUDA-graph replays of
/// 10 runs until 5 repeats and `min_total_ms`; a candidate whose verifying run exceeds 2 ms gets
/// 3 event-timed runs instead. Tuning takes kTuneMeasureMs: the repeats of one candidate in one
/// run spread by about 1%, while 10 ms made measuring, not compiling, bound the trials of a
/// 20 s run on the H100 (ResNet-18 layer 10: 629 trials at 10 ms, 1040 at 3 ms); `tmap replay`
/// and the benchmarks take 10 ms.
TimingOptions tuning_timing(double min_total_ms = 10);
constexpr double kTuneMeasureMs = 3;
/// A tuning run's workers time a candidate more than this many times slower than the fastest of
/// its workload with one repeat (TimingOptions::slow_factor).
constexpr double kTuneSlowFactor = 2;

/// The inputs' seed of a shape's workspace `workspace` in a run of seed `seed`: 0 keeps it. A
/// worker allocates a workspace for each seed, so another seed also puts the tensors elsewhere
/// in memory, which some kernels' times depend on (design notes: "Where the tensors lie").
std::uint64_t workspace_seed(std::uint64_t seed, int workspace);

/// Runs candidates in `tmap worker` processes (see MeasureWorker) on one GPU (`gpu.index`; -1:
/// the runtime's default), verifying each against the reference on the same random inputs (one
/// seed per tuning run). With `references` (shared by a run's measurers) each reference kernel
/// is compiled once for every GPU; without, each worker compiles its own.
class WorkerMeasurer : public Measurer {
 public:
  WorkerMeasurer(std::string binary, double timeout_seconds, TimingOptions timing, bool verify, std::uint64_t seed,
                 MeasureGpu gpu = {}, std::shared_ptr<ReferenceBinaries> references = nullptr);
  ~WorkerMeasurer() override;
  MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                        const CompileResult& binary) override;
  /// The kernel of a range of sizes `c` (Compute::dynamic) measured at `size` (0: `c` is one
  /// shape, or a sample of the range measured at its own size, DynamicExtent::at), on workspace
  /// `workspace` of that shape: 0, the one every candidate of the shape runs on, or another
  /// with inputs and memory of its own (workspace_seed()).
  MeasureResult measure_at(const Compute& c, std::int64_t size, const ImplicitGemm& g, const KernelSource& k,
                           const CompileResult& binary, int workspace = 0);
  MeasureGpu gpu() const override { return gpu_; }
  void prepare(const Compute& c) override;
  int restarts() const { return worker_.restarts(); }

 private:
  MeasureGpu gpu_;
  MeasureWorker worker_;
  TimingOptions timing_;
  bool verify_;
  std::uint64_t seed_;
  std::shared_ptr<ReferenceBinaries> references_;
  TemporaryDirectory dir_;  ///< The binaries handed to the worker.
};

struct TuneProgress {
  int trials = 0, total = 0;
  double best_us = 0, best_tflops = 0;  ///< 0 until a correct result exists.
  std::string arm;                      ///< The mapping of the latest trial.
  double elapsed_s = 0, eta_s = 0;
  double rank_correlation = 0;          ///< Of the latest batch (held out), 0 before the model trains.
  bool model_trained = false;
  const MeasurePool* gpus = nullptr;    ///< Each GPU's measurements, workload and best so far.
};

class RangeLooks;  // tmap/tune/range_looks.h

struct TuneOptions {
  int trials = 200;          ///< 0: as many as the time budget allows; none without one.
  double time_budget_s = 0;  ///< 0: none.
  int early_stop = 0;        ///< Stop after this many trials without improvement; 0: never.
  int batch = 16;
  double explore = 0.2;      ///< Fraction of each batch picked at random from the pools.
  std::uint64_t seed = 1;
  Enumeration enumeration = Enumeration::kAmos;
  std::string log_path;      ///< Appended to; records of the same workload and arch resume.
  /// Logs whose correct measurements of other workloads (same arch) warm-start the cost model;
  /// those of the log itself are always used.
  std::vector<std::string> prior_logs;
  Target target;
  int compute_capability = 90;
  DeviceLimits limits;
  DeviceModel device;
  unsigned compile_threads = 0;  ///< 0: all cores.
  /// Batches compiled ahead of the one being measured (1: only the next one).
  int compile_ahead = 3;
  std::string compile_cache_dir;
  /// At the end (not after a stop), the confirm_top fastest correct candidates are measured again,
  /// confirm_rounds rounds taken in turn, and the best is the fastest median of round medians;
  /// these confirmations are logged (see best_records). 0 turns it off.
  int confirm_top = 4, confirm_rounds = 3;
  std::function<void(const TuneProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;  ///< Informational lines (resume, first looks, ...).
  /// Set (e.g. by SIGINT): stop after the measurements in flight (one per GPU), which are
  /// recorded; compilations not yet started are cancelled and nothing else of the batch is measured.
  const std::atomic<bool>* stop = nullptr;
  /// Set for the samples of a range (tune_range): first looks shared among them.
  std::shared_ptr<RangeLooks> range_looks;
};

struct TuneSummary {
  std::optional<TuneRecord> best;   ///< The fastest correct record, resumed ones included.
  int measured = 0;                 ///< Trials measured in this run.
  int failed = 0;                   ///< Of which errors or wrong results.
  int resumed = 0;                  ///< Records of this workload read back from the log.
  int transferred = 0;              ///< Measurements of other workloads the model started from.
  int arms = 0;
  int first_looks = 0;  ///< Arms given a first look (their model-best candidate) in this run.
  /// Other workloads' best schedules that fit this space (offered), how many of them were
  /// measured (seeded), and how many of those improved the best (seed_wins).
  int offered = 0, seeded = 0, seed_wins = 0;
  double wall_s = 0;
  bool stopped = false;             ///< By the stop flag.
  std::string stop_reason;
  std::vector<double> rank_correlations;       ///< Per batch, once the model trains.
  std::vector<std::pair<int, double>> history; ///< (trials so far, best us) at each improvement.
  /// Where the time went: measuring (the worker: load, verify, time; summed over the GPUs),
  /// GPUs waiting for compiled candidates (GPU-seconds, beyond what overlapped with measuring),
  /// and on the tuner's thread proposing batches (pools ranked by the model), recording results
  /// (the log, the search's and the model's samples) and refitting the cost model.
  double measure_s = 0, compile_wait_s = 0, propose_s = 0, record_s = 0, fit_s = 0;
  MeasurePhases worker;  ///< Of measure_s, what the workers spent on each step.
  /// Adds `o`'s seconds (measure_s ... fit_s, worker) to these: a model's time over its workloads.
  void add_times(const TuneSummary& o);
  /// The confirmation: candidates measured again, the best time before it (single measurements)
  /// and its wall time (within wall_s).
  int confirmed = 0;
  double unconfirmed_best_us = 0, confirm_s = 0;
};

/// What the search's bandit knows of one arm (mapping) when it splits a batch's picks.
struct ArmStanding {
  double best_us;       ///< Best correct measurement; infinity when none.
  double predicted_us;  ///< The cost model's estimate of its best candidate; infinity when unknown.
  bool failed_only;     ///< Measured, but every trial failed.
};

/// The share of a batch's picks each arm gets (summing to 1). Measured arms by their best time
/// against the best overall: exp(-2 log2(best / best overall)), the best arm at least a quarter.
/// Arms not yet measured explore by the model's estimate, on the same scale, and share together
/// at most a fifth of the picks once anything is measured, so that thousands of unmeasured
/// mappings (a conv3d has about 5000) never outweigh the few that have proven fast.
std::vector<double> arm_shares(const std::vector<ArmStanding>& arms);

/// How many arms get a first look (the model's best candidate of each, best arms first): every
/// arm when the trials leave as many for the arms that prove good, else a quarter of the trials
/// (at least a batch). Under a time budget (budget_s > 0) the trials are those the rate so far
/// allows, `measured` in `elapsed_s` (two batches until a batch is measured), `trials` being only
/// a cap: planning every arm's look from a large cap would spend about half of every batch of a
/// short budgeted run on first looks.
std::size_t first_look_limit(int arms, int batch, int trials, double budget_s, double elapsed_s, int measured);

/// Tunes on the pool's GPUs, or one measurer's. Throws UserError when nothing matches.
/// (One TuneTask run to its end, with its own cost model warm-started by read_history.)
TuneSummary tune(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, MeasurePool& gpus);
TuneSummary tune(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, Measurer& measurer);

class CostModel;

/// The workloads of a tuning run by key, and for each with an epilogue the key of its contraction
/// alone (contraction_of()), whose tuned schedules carry over to the fused workload.
struct RunKeys {
  std::set<std::string> own;
  /// A contraction's key -> the fused workloads' (several epilogues may share one contraction).
  std::map<std::string, std::vector<std::string>> contraction;

  /// Workload `c` of key `key` (make_workload(c).key).
  void add(const std::string& key, const Compute& c);
  /// The workloads whose first seeds a record of `key` from another source gives (none: it is
  /// an ordinary seed).
  std::vector<std::string> first_seeds_of(const std::string& key) const;
};

/// What the logs of a tuning run hold for it: the records of its own workloads (in the log, this
/// architecture, measured), by key, to resume from; every other correct measurement (other
/// workloads in the log and prior logs, and the prior logs' of its own) has trained `model`, and
/// is counted; the fastest few of each other workload are seeds (TuneTask::offer), and those of
/// each own workload in the prior logs, or of its contraction alone in any log, are that
/// workload's first seeds.
struct LogHistory {
  std::map<std::string, std::vector<TuneRecord>> own;
  int transferred = 0;
  std::vector<CandidateRef> seeds;
  std::map<std::string, std::vector<CandidateRef>> first_seeds;
};

LogHistory read_history(CostModel& model, const RunKeys& keys, const std::vector<HwAbstraction>& hws,
                        const TuneOptions& o);

/// One workload's search, run in steps: model-level tuning interleaves the tasks of a model's
/// workloads, all learning into and ranking with one cost model. Construction resumes from
/// `own` (records of this workload) and picks the first looks (o.trials says how many the task
/// expects to get); each run() measures up to `trials` more candidates, appending to `log`
/// (may be null). `c`, `model` and `log` must outlive the task.
class TuneTask {
 public:
  TuneTask(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, CostModel& model,
           const std::vector<TuneRecord>& own, LogWriter* log);
  ~TuneTask();
  TuneTask(const TuneTask&) = delete;
  TuneTask& operator=(const TuneTask&) = delete;
  /// When a run returns: once its measurements are all recorded, or once they have all started
  /// (the last ones are recorded by whichever run, or MeasurePool::deliver_all, collects them).
  enum class RunEnd { kAllRecorded, kAllStarted };
  /// Candidates are measured on every GPU of the pool at once, each as soon as it has compiled
  /// and a GPU is free; results of other tasks collected meanwhile are delivered to them. Stops
  /// early on o.stop, on `out_of_time()` (checked after each measurement), on o.early_stop, or
  /// when the space is exhausted; a batch compiled ahead is kept for the next run.
  void run(int trials, MeasurePool& gpus, const std::function<bool()>& out_of_time,
           RunEnd end = RunEnd::kAllRecorded);
  /// Candidates of this task being measured now (started, not yet recorded).
  int in_flight() const;
  /// Starts compiling one batch (o.batch) in the background for the next run, unless one is
  /// already compiling: model-level tuning compiles the next workload's batch while measuring.
  void prefetch();
  /// Ends the task's compiling: what waits for a compile worker is cancelled now, what compiles
  /// finishes in the background; destroying it then waits for no more than that. Tasks that end
  /// together are all abandoned first, so that none waits while the others keep the compile
  /// workers busy. The task runs no more after this.
  void abandon();
  /// Another workload's schedule (its mapping named by iterators, as in a log record), tried in
  /// a later batch when this space has that mapping, the schedule is valid here and untried:
  /// similar layers often share their winning tiles, and the evolution then starts from them.
  /// Each batch gives at most a quarter of its slots to seeds, the model's best first. `first`:
  /// this workload's own schedule from a prior log (another GPU's tuning, an earlier shard), which
  /// the next batch measures before anything else. Returns whether it was taken.
  bool offer(const CandidateRef& seed, bool first = false);
  /// Measures the o.confirm_top fastest correct candidates again (see TuneOptions) on the pool's
  /// first GPU, logs the confirmations and makes the best the fastest confirmed one. Estimated
  /// seconds it takes: confirm_seconds().
  void confirm(MeasurePool& gpus);
  double confirm_seconds() const;
  /// Counts over every run so far (wall_s: their time; transferred is not filled in).
  const TuneSummary& summary() const;
  bool exhausted() const;
  const Workload& workload() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// Without a GPU: ranks candidates with the analytic model alone, compiles the best `o.trials`
/// of them to check that they compile, and records them as unmeasured, with the estimate.
TuneSummary rank_with_model(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o);

/// The features, measured and analytic times of the correct records of one architecture, per
/// workload key, regenerated from the records alone (what the cost model learns from). Records
/// whose compute is unreadable or whose arm no longer exists are skipped. A range's record is
/// seen at the size its kernel ran at (TuneResult::size).
struct MeasuredSet {
  std::vector<Features> features;
  std::vector<double> times_us, analytic_us;
};
std::map<std::string, MeasuredSet> measured_sets(const std::vector<TuneRecord>& records,
                                                 const std::vector<HwAbstraction>& hws, const std::string& arch,
                                                 const DeviceLimits& limits, const DeviceModel& d);

/// A record's kernel, regenerated. The compute and the space are owned here.
struct Regenerated {
  std::unique_ptr<Compute> compute;
  std::unique_ptr<const std::vector<HwAbstraction>> hws;  // the record's abstraction, which space points into
  std::unique_ptr<SearchSpace> space;
  int entry = -1;
  ScheduleParams params;
  KernelSource kernel;
  const ImplicitGemm& gemm() const { return space->entries()[entry].gemm; }
};

/// Rebuilds the compute from the record, finds its arm among the mappings onto the abstraction
/// the record names (the only one matched) and emits the kernel. Throws UserError naming what no
/// longer matches (an abstraction missing, a mapping not found, invalid params).
Regenerated regenerate(const TuneRecord& r, const std::vector<HwAbstraction>& hws, int compute_capability);

}  // namespace tmap
