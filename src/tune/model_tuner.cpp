#include "tmap/tune/model_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <memory>

#include "tmap/support/diagnostic.h"
#include "tmap/tune/cost_model.h"

namespace tmap {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// A workload without a correct kernel after this many batches is given up (its failures are
/// in the log); one that stopped improving (early_stop) or exhausted its space is retired.
constexpr int kRoundsWithoutKernel = 3;

struct Slot {
  ModelTaskResult result;
  const Compute* compute = nullptr;
  std::unique_ptr<TuneTask> task;
  bool retired = false;
};

double best_of(const TuneSummary& s) { return s.best && s.best->result.ok() ? s.best->result.median_us : kInf; }

/// The model time (us) one more batch of `batch` trials is expected to save on this workload:
/// count x best x expected relative gain, the gain being the larger of half its relative
/// improvement over its last two batches and a prior that shrinks with its trials.
double expected_gain(const Slot& s, int batch) {
  const TuneSummary& x = s.task->summary();
  const double best = best_of(x);
  const int trials = x.resumed + x.measured;
  const double prior = 0.3 * batch / (trials + batch);
  double recent = 0;
  const int window = 2 * batch;
  if (!x.history.empty() && trials > window) {
    double before = kInf;  // the best as it was `window` trials ago
    for (const auto& [at, us] : x.history)
      if (at <= trials - window) before = us;
    if (before < kInf) recent = (before - best) / before / 2;  // per batch
    else recent = 0.5;                                          // first kernel found within the window
  }
  return s.result.count * best * std::max(prior, recent);
}

}  // namespace

double ModelTuneSummary::weighted_us() const {
  double sum = 0;
  for (const auto& t : tasks)
    if (best_of(t.summary) < kInf) sum += t.count * best_of(t.summary);
  return sum;
}

ModelTuneSummary tune_model(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws,
                            const ModelTuneOptions& o, Measurer& measurer) {
  const auto t0 = Clock::now();
  if (o.trials <= 0 && o.time_budget_s <= 0) throw InternalError("tune_model needs a trial or a time budget");
  ModelTuneSummary out;
  TuneOptions base = o.tune;
  base.on_progress = nullptr;
  base.time_budget_s = 0;
  const int batch = std::max(1, base.batch);
  auto note = [&](const std::string& s) {
    if (base.on_note) base.on_note(s);
  };

  // Workloads of the same key (the same computation under two names) are one task.
  std::vector<Slot> slots;
  std::map<std::string, std::size_t> by_key;
  std::set<std::string> keys;
  for (const ModelTask& t : tasks) {
    const Workload w = make_workload(*t.compute);
    auto it = by_key.find(w.key);
    if (it != by_key.end()) {
      slots[it->second].result.count += t.count;
      continue;
    }
    by_key[w.key] = slots.size();
    keys.insert(w.key);
    Slot s;
    s.result.name = t.name;
    s.result.key = w.key;
    s.result.count = t.count;
    s.result.flops = w.description["flops"].get<double>();
    s.compute = t.compute;
    slots.push_back(std::move(s));
  }

  CostModel model;
  LogHistory history = read_history(model, keys, hws, base);
  out.transferred = history.transferred;
  std::unique_ptr<LogWriter> log;
  if (!base.log_path.empty()) log = std::make_unique<LogWriter>(base.log_path);
  // Each workload expects about its FLOP share of the trials (for its first looks), at least 2 batches.
  double total_flops = 0;
  for (const Slot& s : slots) total_flops += s.result.count * s.result.flops;
  for (Slot& s : slots) {
    TuneOptions to = base;
    const double share = total_flops > 0 ? s.result.count * s.result.flops / total_flops : 1.0 / slots.size();
    const int expected = o.trials > 0 ? static_cast<int>(o.trials * share) : 64;
    to.trials = std::max(2 * batch, expected);
    // One batch beyond the one measured (the scheduler also compiles the next workload's): a
    // run's slowest kernels then wait for its next run instead of holding this one up.
    to.compile_ahead = 2;
    to.on_note = [&note, name = s.result.name](const std::string& line) { note(name + ": " + line); };
    s.task = std::make_unique<TuneTask>(*s.compute, hws, to, model, history.own[s.result.key], log.get());
    for (const CandidateRef& seed : history.seeds) s.task->offer(seed);
  }
  // A workload's new best is offered to the others as a seed (its mapping and tiles often suit
  // a layer of similar shape), as are the resumed bests at the start.
  auto share_best = [&](const Slot& from) {
    const auto& best = from.task->summary().best;
    if (!best) return;
    for (Slot& to : slots)
      if (&to != &from && !to.retired) to.task->offer(best->candidate);
  };
  for (const Slot& s : slots) share_best(s);

  // The confirmation of each workload's fastest candidates at the end is kept within the budget.
  auto confirm_seconds = [&] {
    double t = 0;
    for (const Slot& s : slots) t += s.task->confirm_seconds();
    return t;
  };
  auto out_of_time = [&] { return o.time_budget_s > 0 && seconds_since(t0) + confirm_seconds() > o.time_budget_s; };
  auto stop_requested = [&] { return base.stop && base.stop->load(); };
  auto measured = [&] {
    int n = 0;
    for (const Slot& s : slots) n += s.task->summary().measured;
    return n;
  };
  auto progress = [&](const Slot& current) {
    if (!o.on_progress) return;
    ModelProgress p;
    p.trials = measured();
    p.total_trials = o.trials;
    p.elapsed_s = seconds_since(t0);
    double eta = kInf;
    if (o.time_budget_s > 0) eta = std::max(0.0, o.time_budget_s - p.elapsed_s);
    if (o.trials > 0 && p.trials > 0) eta = std::min(eta, p.elapsed_s / p.trials * std::max(0, o.trials - p.trials));
    p.eta_s = eta < kInf ? eta : 0;
    p.tasks = static_cast<int>(slots.size());
    for (const Slot& s : slots) {
      const double b = best_of(s.task->summary());
      if (b < kInf) {
        p.weighted_us += s.result.count * b;
        ++p.with_kernel;
      }
    }
    p.task = current.result.name;
    const double b = best_of(current.task->summary());
    p.task_best_us = b < kInf ? b : 0;
    o.on_progress(p);
  };
  auto trials_left = [&] { return o.trials > 0 ? o.trials - measured() : batch; };

  // One batch for `s`, while `next` (the workload expected to come next) compiles its batch;
  // returns false when the run must end.
  auto give_round = [&](Slot& s, Slot* next) {
    const int n = std::min(batch, trials_left());
    if (n <= 0) return false;
    if (next && next != &s && !next->retired && trials_left() > n) next->task->prefetch();
    ++s.result.rounds;
    const int before = s.task->summary().measured;
    const double best_before = best_of(s.task->summary());
    s.task->run(n, measurer, [&] {
      progress(s);
      return out_of_time();
    });
    const TuneSummary& x = s.task->summary();
    if (best_of(x) < best_before) share_best(s);
    if (s.task->exhausted()) s.retired = true;
    if (base.early_stop > 0 && x.stop_reason.rfind("no improvement", 0) == 0) s.retired = true;
    if (best_of(x) == kInf && s.result.rounds >= kRoundsWithoutKernel) {
      s.retired = true;
      note(s.result.name + ": no correct kernel in " + std::to_string(s.result.rounds) + " batches; given up");
    }
    if (x.measured == before && !s.task->exhausted() && !stop_requested() && !out_of_time()) s.retired = true;
    return !stop_requested() && !out_of_time();
  };

  std::string reason;
  // Warm-up: rounds of one batch each, largest share first, until every workload has had
  // warmup_batches batches' worth of trials (resumed records count).
  std::vector<std::size_t> order(slots.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return slots[a].result.count * slots[a].result.flops > slots[b].result.count * slots[b].result.flops;
  });
  bool go = true;
  const int warmup = std::max(1, o.warmup_batches);
  auto in_warmup = [&](const Slot& s, int round) {
    const TuneSummary& x = s.task->summary();
    return !s.retired && x.resumed + x.measured < (round + 1) * batch;
  };
  for (int round = 0; go && round < warmup; ++round)
    for (std::size_t k = 0; k < order.size(); ++k) {
      if (!go || !in_warmup(slots[order[k]], round)) continue;
      Slot* next = nullptr;  // the next workload of the warm-up
      for (std::size_t j = k + 1; j < order.size() && !next; ++j)
        if (in_warmup(slots[order[j]], round)) next = &slots[order[j]];
      for (std::size_t j = 0; j < order.size() && !next && round + 1 < warmup; ++j)
        if (in_warmup(slots[order[j]], round + 1)) next = &slots[order[j]];
      go = give_round(slots[order[k]], next);
    }
  // Then the batch goes where it is expected to save the most model time.
  while (go) {
    // The best and the runner-up by expected gain: the runner-up compiles while the best is
    // measured (it is usually the next pick).
    Slot *pick = nullptr, *second = nullptr;
    double best_gain = -1, second_gain = -1;
    for (Slot& s : slots) {
      if (s.retired) continue;
      const double gain = best_of(s.task->summary()) == kInf ? kInf : expected_gain(s, batch);
      if (gain > best_gain) {
        second = pick, second_gain = best_gain;
        best_gain = gain, pick = &s;
      } else if (gain > second_gain) {
        second_gain = gain, second = &s;
      }
    }
    if (!pick) {
      reason = "every workload is done (exhausted, converged or given up)";
      break;
    }
    go = give_round(*pick, second);
  }
  if (stop_requested()) {
    out.stopped = true;
    reason = "stopped by the user";
  } else if (out_of_time()) {
    reason = "time budget reached";
  } else if (reason.empty()) {
    reason = "trial budget reached";
  }
  out.stop_reason = reason;
  for (Slot& s : slots) s.task->confirm(measurer);  // none after a stop
  for (Slot& s : slots) {
    s.result.summary = s.task->summary();
    out.measured += s.result.summary.measured;
    out.tasks.push_back(s.result);
  }
  for (Slot& s : slots) s.task.reset();  // waits for batches compiled ahead
  out.wall_s = seconds_since(t0);
  return out;
}

}  // namespace tmap
