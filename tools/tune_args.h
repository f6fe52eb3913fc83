// `tmap tune`'s three modes share this: its options, the stop on SIGINT/SIGTERM, the options of
// the search, and the text of its summaries. One compute lives in cmd_tune.cpp (with the
// options' registration), a range of sizes in tune_range.cpp, a model or table in tune_model.cpp.
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "tmap/frontend/workload_table.h"
#include "tmap/tune/tuner.h"
#include "tuning_cli.h"

namespace tmap {
class MeasurePool;
}  // namespace tmap

namespace tmap::cli {

struct TuneArgs {
  ComputeArgs compute;
  HwSelection hw;
  std::vector<std::string> prior, dims;
  std::string log, arch, measure = "gpu", enumerate = "amos", emit_cuda, cache_dir, format = "text";
  std::string model, table, layout = "nchw", shard, gpus = "all";
  std::int64_t batch = 0;        ///< --batch: the model's batch, as in tmap import.
  std::int64_t model_batch = 0;  ///< --model-batch: the old spelling of --batch.
  bool no_baselines = false;
  std::string objective = "total";  ///< --objective: what a model's or table's batches go to lower.
  bool trials_given = false;     ///< --trials was given (else a time budget alone may bound the run).
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

/// While alive, SIGINT and SIGTERM ask the tuner to stop after the measurement in flight (it is
/// recorded); a second signal ends the process at once (SA_RESETHAND), which still leaves a valid
/// log because every record is appended by one write.
class StopOnSignals {
 public:
  StopOnSignals();
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

/// Whether a signal asked the run to stop, and which (0: none).
const std::atomic<bool>& stop_requested();
int stop_signal();
/// After a run a signal stopped: the exit status of death by that signal (128 + its number).
void exit_status_after_signal();

/// Where the measuring workers' time went, and a run's (TuneSummary's seconds), as text and JSON.
std::string phases_text(const MeasurePhases& w);
nlohmann::json phases_json(const MeasurePhases& w);
std::string time_text(const TuneSummary& s);
nlohmann::json time_json(const TuneSummary& s);
/// "42s" or "3m05s".
std::string duration_text(double s);

/// The options that tune one workload, a range and a whole model alike.
TuneOptions tune_options(const TuneArgs& a, const Machine& m, const std::string& log_path);
/// Checks that this machine can measure, or that --measure model was asked for.
void check_measurable(const TuneArgs& a, const Machine& m);

/// Whether a progress line is due: on a terminal at every trial; else once per batch, and with
/// several GPUs (a line each) at most every 10 s.
struct ProgressPace {
  int last_trials = 0;
  double last_s = -1e9;
  bool due(const TuneArgs& a, bool tty, int trials, int total, double elapsed_s, std::size_t gpus);
};
/// The progress lines of a run: the total, then one per GPU when there are several.
std::vector<std::string> progress_lines(const char* total, const MeasurePool* gpus, double elapsed_s);

/// `tmap tune` of compute `c`'s range of sizes (range_tuner.h), on the GPU (tune_range.cpp).
void tune_range_command(const TuneArgs& args, const Compute& c, const std::vector<HwAbstraction>& hws, Machine& m);
/// Tunes a table's range workloads, each on its own with `budget_s` (tune_range.cpp); prints each
/// summary as text, or returns them for the JSON document. `whole`: the table's workloads
/// before sharding, which share --trials.
nlohmann::json tune_table_ranges(const TuneArgs& a, const WorkloadTable& table, std::size_t whole, Machine& m,
                                 const std::string& log_path, double budget_s);
/// `tmap tune --model M.onnx` / `--table T.json` (tune_model.cpp).
void tune_model_command(const TuneArgs& a);

}  // namespace tmap::cli
