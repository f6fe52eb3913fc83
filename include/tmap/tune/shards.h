// Splitting a model's workloads over machines: `tmap tune --table T --shard I/N` tunes a
// deterministic share of the table, balanced by each workload's estimated tuning cost, so that
// N array tasks (Slurm) or indexed pods (Kubernetes) finish together. Their logs are then joined
// with `tmap logs merge` (tune_log.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tmap {

struct Shard {
  int index = 0;  ///< 0 <= index < count.
  int count = 1;
};

/// Reads `environment variable -> value (nullptr when unset)`, std::getenv by default.
using EnvLookup = std::function<const char*(const char*)>;

/// The shard `text` names: "I/N"; "auto" (a Slurm array task: SLURM_ARRAY_TASK_ID minus
/// SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT); or "auto/N" (a Kubernetes Indexed Job's
/// JOB_COMPLETION_INDEX, else a Slurm task's index, of N). A UserError naming --shard and the
/// fix otherwise.
Shard parse_shard(const std::string& text, const EnvLookup& env = {});

/// The estimated seconds tuning a workload of `flops` per run takes per trial: its compile,
/// plus its measurement (3 warm-up and at least 10 timed runs, at least 20 ms in all) at a
/// pessimistic 100 TFLOP/s.
double tuning_cost_estimate(double flops);

/// The workloads (indices into `costs`) shard `s` tunes: largest estimated cost first, each to
/// the shard with the least so far (the lower index on ties). The same list gives every shard
/// the same split, and together the shards hold every workload once.
std::vector<std::size_t> shard_workloads(const std::vector<double>& costs, Shard s);

}  // namespace tmap
