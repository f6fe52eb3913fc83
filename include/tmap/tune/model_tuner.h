// Model-level tuning: every unique workload of a model (a workload table) tuned under one trial
// or time budget, with one cost model shared by all of them (warm-started from the log's other
// workloads). A task scheduler in the manner of Ansor's gives each next batch of trials to the
// workload where it is expected to save the most of the model's time: its count x best time x
// the relative improvement expected of one more batch (from its recent progress, with a prior
// that shrinks as its trials grow); or, for a table whose rows are separate problems, the most
// of their geometric mean (count x relative improvement: TuneObjective). Every workload first
// gets `warmup_batches` batches, in rounds (largest FLOP share first), so that each has a kernel
// early and none is judged on its first looks alone: on the H100, ResNet-50's small layers
// still improve by 1.5-1.8x between 16 and 48-96 trials. Records resume from the log and count
// towards the warm-up. Each workload's new best is offered to the others as a seed
// (TuneTask::offer): ResNet-50's layers share mappings and tiles, and a schedule found on one is
// often near the best of another.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tmap/tune/tuner.h"

namespace tmap {

struct ModelTask {
  std::string name;
  const Compute* compute = nullptr;  ///< Outlives tune_model().
  int count = 1;                     ///< Runs per inference: the weight of its time.
};

struct ModelProgress {
  int trials = 0, total_trials = 0;  ///< total_trials: 0 without a trial budget.
  double elapsed_s = 0, eta_s = 0;
  double weighted_us = 0;            ///< Sum of count x best over the workloads with a kernel.
  int with_kernel = 0, tasks = 0;
  std::string task;                  ///< The workload of the latest trial.
  double task_best_us = 0;
  const MeasurePool* gpus = nullptr; ///< Each GPU's measurements, workload and best so far.
};

/// What the scheduler's batches go to lower. kTotal: the model's time, the sum of count x best
/// (a model's workloads, which run one after another). kGeomean: the geometric mean of the
/// workloads' best times, each weighted by its count, where every workload is its own problem (a
/// benchmark table's rows): a batch goes where it is expected to gain the most relatively, so
/// that a 6 us row is not starved beside a 1.6 ms one.
enum class TuneObjective { kTotal, kGeomean };

struct ModelTuneOptions {
  /// Per-workload options (log, batch, seed, target, stop flag, ...); its trials, time_budget_s
  /// and on_progress are ignored, and early_stop retires a workload rather than stopping the run.
  TuneOptions tune;
  int trials = 0;            ///< Trials over all workloads; 0: only the time budget.
  double time_budget_s = 0;  ///< Seconds for the whole model; 0: only the trial budget.
  int warmup_batches = 3;    ///< Batches every workload gets before the scheduler weighs them.
  TuneObjective objective = TuneObjective::kTotal;
  std::function<void(const ModelProgress&)> on_progress;
};

struct ModelTaskResult {
  std::string name, key;
  int count = 1;
  double flops = 0;    ///< Of one run.
  TuneSummary summary; ///< This run's trials, resumed records and the best.
  int rounds = 0;      ///< Batches it was given.
};

struct ModelTuneSummary {
  std::vector<ModelTaskResult> tasks;  ///< In the order given (workloads with the same key merged).
  int measured = 0, transferred = 0;
  double wall_s = 0;
  /// Of wall_s: before the first batch (the slots, the log's history and the model's warm
  /// start), and after the budget ended (the last measurements, the confirmations, and the
  /// batches compiled ahead awaited); finish_compile_s: of finish_s, the last of them.
  double setup_s = 0, finish_s = 0, finish_compile_s = 0;
  bool stopped = false;
  std::string stop_reason;
  /// (seconds into the run, weighted_us) whenever the model total improved.
  std::vector<std::pair<double, double>> history;
  /// Sum of count x best time over the workloads with a correct kernel.
  double weighted_us() const;
};

/// Tunes the tasks on the pool's GPUs (or one measurer's); a UserError when one has nothing to
/// tune (see tune()).
ModelTuneSummary tune_model(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws,
                            const ModelTuneOptions& o, MeasurePool& gpus);
ModelTuneSummary tune_model(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws,
                            const ModelTuneOptions& o, Measurer& measurer);

}  // namespace tmap
