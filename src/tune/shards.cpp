// Splitting a model's workloads over machines (shards.h).
#include "tmap/tune/shards.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

[[noreturn]] void bad_shard(const std::string& why, const std::string& fix) {
  throw_user_error(SourceLoc::whole("--shard"), why, fix);
}

/// A non-negative integer of at most 6 digits, or -1.
int small_number(const std::string& s) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(s);
}

/// Environment variable `name` as a small number: -1 when unset, a UserError when not a number.
int env_number(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v) return -1;
  const int n = small_number(v);
  if (n < 0) bad_shard(std::string(name) + " is '" + v + "', not a number", "run under the scheduler that sets it");
  return n;
}

}  // namespace

Shard parse_shard(const std::string& text, const EnvLookup& env_in) {
  const EnvLookup env = env_in ? env_in : EnvLookup([](const char* n) { return std::getenv(n); });
  const std::string fix = "give I/N (0 <= I < N), 'auto' in a Slurm array job, or 'auto/N' in a Kubernetes Indexed Job";
  const auto slash = text.find('/');
  const std::string first = text.substr(0, slash), second = slash == std::string::npos ? "" : text.substr(slash + 1);
  Shard s;
  if (first == "auto") {
    const int slurm_id = env_number(env, "SLURM_ARRAY_TASK_ID"), k8s = env_number(env, "JOB_COMPLETION_INDEX");
    if (slash == std::string::npos) {  // Slurm says both
      const int count = env_number(env, "SLURM_ARRAY_TASK_COUNT"), min = std::max(0, env_number(env, "SLURM_ARRAY_TASK_MIN"));
      if (slurm_id < 0 || count < 0)
        bad_shard("'auto' needs SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm array job)",
                  "in a Kubernetes Indexed Job give the shard count: --shard auto/N");
      s.index = slurm_id - min, s.count = count;
    } else {
      s.count = small_number(second);
      s.index = k8s >= 0 ? k8s : slurm_id - std::max(0, env_number(env, "SLURM_ARRAY_TASK_MIN"));
      if (k8s < 0 && slurm_id < 0)
        bad_shard("'" + text + "' needs JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID",
                  "outside a scheduler give the shard by number: --shard I/N");
    }
  } else {
    s.index = small_number(first), s.count = small_number(second);
    if (slash == std::string::npos || s.index < 0) bad_shard("'" + text + "' is no shard", fix);
  }
  if (s.count < 1 || s.index < 0 || s.index >= s.count)
    bad_shard("shard " + std::to_string(s.index) + " of " + std::to_string(s.count) + " does not exist (from '" + text + "')",
              fix);
  return s;
}

double tuning_cost_estimate(double flops) {
  const double compile_s = 0.05, run_s = flops / 100e12;
  return compile_s + std::max(0.02, 13 * run_s);
}

std::vector<std::size_t> shard_workloads(const std::vector<double>& costs, Shard s) {
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<std::size_t>(s.count), 0.0);
  std::vector<std::size_t> mine;
  for (std::size_t w : order) {
    const auto least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[static_cast<std::size_t>(least)] += costs[w];
    if (least == s.index) mine.push_back(w);
  }
  std::sort(mine.begin(), mine.end());  // in the table's order
  return mine;
}

}  // namespace tmap
