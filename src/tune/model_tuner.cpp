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
  double shared_us = kInf;  ///< The best offered to the other workloads so far.
};

double best_of(const TuneSummary& s) { return s.best && s.best->result.ok() ? s.best->result.median_us : kInf; }

/// What one more batch of `batch` trials is expected to save on this workload: count x expected
/// relative gain, times its best time where the objective is the model's total (us of the model's
/// time); the gain is the larger of half its relative improvement over its last two batches and
/// a prior that shrinks with its trials.
double expected_gain(const Slot& s, int batch, TuneObjective objective) {
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
  return s.result.count * (objective == TuneObjective::kTotal ? best : 1.0) * std::max(prior, recent);
}

}  // namespace

double ModelTuneSummary::weighted_us() const {
  double sum = 0;
  for (const auto& t : tasks)
    if (best_of(t.summary) < kInf) sum += t.count * best_of(t.summary);
  return sum;
}

namespace {

/// One model's tuning run: a TuneTask per distinct workload (a slot), sharing the cost model and
/// the log, given batches by a warm-up in order of FLOP share and then by expected gain.
class ModelScheduler {
 public:
  ModelScheduler(const ModelTuneOptions& o, MeasurePool& gpus) : o_(o), base_(o.tune), gpus_(gpus) {
    base_.on_progress = nullptr;
    base_.time_budget_s = 0;
    batch_ = std::max(1, base_.batch);
  }

  ModelTuneSummary run(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws) {
    const RunKeys keys = make_slots(tasks);
    LogHistory history = read_history(model_, keys, hws, base_);
    out_.transferred = history.transferred;
    if (!base_.log_path.empty()) log_ = std::make_unique<LogWriter>(base_.log_path);
    start_tasks(hws, history);
    for (const Slot& s : slots_) gpus_.prepare(*s.compute);  // the references compile in the background
    share_new_bests();  // what the log resumed
    note_total();
    out_.setup_s = seconds_since(t0_);
    try {
      bool go = warm_up();
      std::string reason = go ? spend_by_gain() : "";
      finish(reason);
    } catch (...) {
      gpus_.abandon_all();  // the measurements in flight read the tasks' spaces
      throw;
    }
    return out_;
  }

 private:
  void note(const std::string& s) const {
    if (base_.on_note) base_.on_note(s);
  }

  /// Workloads of the same key (the same computation under two names) are one slot; returns the
  /// slots' keys.
  RunKeys make_slots(const std::vector<ModelTask>& tasks) {
    std::map<std::string, std::size_t> by_key;
    RunKeys keys;
    for (const ModelTask& t : tasks) {
      const Workload w = make_workload(*t.compute);
      auto it = by_key.find(w.key);
      if (it != by_key.end()) {
        slots_[it->second].result.count += t.count;
        continue;
      }
      by_key[w.key] = slots_.size();
      keys.add(w.key, *t.compute);
      Slot s;
      s.result.name = t.name;
      s.result.key = w.key;
      s.result.count = t.count;
      s.result.flops = w.description["flops"].get<double>();
      s.compute = t.compute;
      slots_.push_back(std::move(s));
    }
    return keys;
  }

  /// Each workload expects about its FLOP share of the trials (for its first looks), at least 2
  /// batches; the resumed bests of every workload are offered to it as seeds.
  void start_tasks(const std::vector<HwAbstraction>& hws, LogHistory& history) {
    double total_flops = 0;
    for (const Slot& s : slots_) total_flops += s.result.count * s.result.flops;
    for (Slot& s : slots_) {
      TuneOptions to = base_;
      // Each workload draws from a stream of its own, whichever workloads it is tuned with (a
      // shard's or the whole table's): with one seed, workloads whose spaces match (a range's
      // samples, which search the same kernels) drew the same random pools, took the same
      // first looks and measured the same kernels again at every sample.
      to.seed = base_.seed ^ std::stoull(s.result.key, nullptr, 16);  // the key: 16 hex digits
      const double share = total_flops > 0 ? s.result.count * s.result.flops / total_flops : 1.0 / slots_.size();
      const int expected = o_.trials > 0 ? static_cast<int>(o_.trials * share) : 64;
      to.trials = std::max(2 * batch_, expected);
      // One batch beyond the one measured (the scheduler also compiles the next workload's): a
      // run's slowest kernels then wait for its next run instead of holding this one up.
      to.compile_ahead = 2;
      to.on_note = [this, name = s.result.name](const std::string& line) { note(name + ": " + line); };
      s.task = std::make_unique<TuneTask>(*s.compute, hws, to, model_, history.own[s.result.key], log_.get());
      for (const CandidateRef& seed : history.first_seeds[s.result.key]) s.task->offer(seed, true);
      for (const CandidateRef& seed : history.seeds) s.task->offer(seed);
    }
  }

  /// A workload's new best is offered to the others as a seed (its mapping and tiles often suit
  /// a layer of similar shape).
  void share_best(const Slot& from) {
    const auto& best = from.task->summary().best;
    if (!best) return;
    for (Slot& to : slots_)
      if (&to != &from && !to.retired) to.task->offer(best->candidate);
  }

  /// The confirmation of each workload's fastest candidates at the end is kept within the budget.
  bool out_of_time() const {
    if (o_.time_budget_s <= 0) return false;
    double confirm = 0;
    for (const Slot& s : slots_) confirm += s.task->confirm_seconds();
    return seconds_since(t0_) + confirm > o_.time_budget_s;
  }
  bool stop_requested() const { return base_.stop && base_.stop->load(); }
  int measured() const {
    int n = 0;
    for (const Slot& s : slots_) n += s.task->summary().measured;
    return n;
  }
  /// Measured, or being measured.
  int started() const {
    int n = 0;
    for (const Slot& s : slots_) n += s.task->summary().measured + s.task->in_flight();
    return n;
  }
  int trials_left() const { return o_.trials > 0 ? o_.trials - started() : batch_; }

  void progress(const Slot& current) const {
    if (!o_.on_progress) return;
    ModelProgress p;
    p.trials = measured();
    p.total_trials = o_.trials;
    p.elapsed_s = seconds_since(t0_);
    double eta = kInf;
    if (o_.time_budget_s > 0) eta = std::max(0.0, o_.time_budget_s - p.elapsed_s);
    if (o_.trials > 0 && p.trials > 0) eta = std::min(eta, p.elapsed_s / p.trials * std::max(0, o_.trials - p.trials));
    p.eta_s = eta < kInf ? eta : 0;
    p.tasks = static_cast<int>(slots_.size());
    for (const Slot& s : slots_) {
      const double b = best_of(s.task->summary());
      if (b < kInf) {
        p.weighted_us += s.result.count * b;
        ++p.with_kernel;
      }
    }
    p.task = current.result.name;
    const double b = best_of(current.task->summary());
    p.task_best_us = b < kInf ? b : 0;
    p.gpus = &gpus_;
    o_.on_progress(p);
  }

  /// One batch for `s`, while `next` (the workload expected to come next) compiles its batch;
  /// retires `s` when it is exhausted, converged or given up. False when the run must end.
  bool give_round(Slot& s, Slot* next) {
    const int n = std::min(batch_, trials_left());
    if (n <= 0) return false;
    ++s.result.rounds;
    const int before = s.task->summary().measured + s.task->in_flight();
    // The next workload's batch is proposed once this one's first measurement is back, while
    // the GPUs measure the rest: proposing it first would hold them all up.
    bool prefetched = !next || next == &s || next->retired || trials_left() <= n;
    // The run returns once its last candidates have started: the next workload's first ones
    // start as GPUs free up, instead of after the slowest of this batch.
    s.task->run(
        n, gpus_,
        [&] {
          if (!prefetched) next->task->prefetch();
          prefetched = true;
          progress(s);
          return out_of_time();
        },
        TuneTask::RunEnd::kAllStarted);
    share_new_bests();
    const TuneSummary& x = s.task->summary();
    if (s.task->exhausted()) s.retired = true;
    if (base_.early_stop > 0 && x.stop_reason.rfind("no improvement", 0) == 0) s.retired = true;
    if (best_of(x) == kInf && s.result.rounds >= kRoundsWithoutKernel) {
      s.retired = true;
      note(s.result.name + ": no correct kernel in " + std::to_string(s.result.rounds) + " batches; given up");
    }
    if (x.measured + s.task->in_flight() == before && !s.task->exhausted() && !stop_requested() && !out_of_time())
      s.retired = true;
    return !stop_requested() && !out_of_time();
  }

  /// Offers each workload's new best to the others and notes the model total, after a round
  /// (whose run also records the measurements of other workloads that it collects).
  void share_new_bests() {
    bool improved = false;
    for (Slot& s : slots_) {
      const double b = best_of(s.task->summary());
      if (b < s.shared_us) {
        s.shared_us = b;
        share_best(s);
        improved = true;
      }
    }
    if (improved) note_total();
  }

  /// Adds the model total to the history when every workload has a kernel and it improved.
  void note_total() {
    double sum = 0;
    for (const Slot& s : slots_) {
      const double b = best_of(s.task->summary());
      if (b == kInf && !s.retired) return;  // not comparable yet
      if (b < kInf) sum += s.result.count * b;
    }
    if (out_.history.empty() || sum < out_.history.back().second) out_.history.emplace_back(seconds_since(t0_), sum);
  }

  /// Rounds of one batch each, largest share first, until every workload has had
  /// warmup_batches batches' worth of trials (resumed records count). False when the run must end.
  bool warm_up() {
    std::vector<std::size_t> order(slots_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return slots_[a].result.count * slots_[a].result.flops > slots_[b].result.count * slots_[b].result.flops;
    });
    const int warmup = std::max(1, o_.warmup_batches);
    auto in_warmup = [&](const Slot& s, int round) {
      const TuneSummary& x = s.task->summary();
      return !s.retired && x.resumed + x.measured < (round + 1) * batch_;
    };
    bool go = true;
    for (int round = 0; go && round < warmup; ++round)
      for (std::size_t k = 0; k < order.size(); ++k) {
        if (!go || !in_warmup(slots_[order[k]], round)) continue;
        Slot* next = nullptr;  // the next workload of the warm-up
        for (std::size_t j = k + 1; j < order.size() && !next; ++j)
          if (in_warmup(slots_[order[j]], round)) next = &slots_[order[j]];
        for (std::size_t j = 0; j < order.size() && !next && round + 1 < warmup; ++j)
          if (in_warmup(slots_[order[j]], round + 1)) next = &slots_[order[j]];
        go = give_round(slots_[order[k]], next);
      }
    return go;
  }

  /// Then each batch goes where it is expected to save the most model time; the runner-up
  /// compiles while the pick is measured (it is usually the next pick). Returns the reason it
  /// ended when no workload is left, else "".
  std::string spend_by_gain() {
    for (bool go = true; go;) {
      Slot *pick = nullptr, *second = nullptr;
      double best_gain = -1, second_gain = -1;
      for (Slot& s : slots_) {
        if (s.retired) continue;
        const double gain = best_of(s.task->summary()) == kInf ? kInf : expected_gain(s, batch_, o_.objective);
        if (gain > best_gain) {
          second = pick, second_gain = best_gain;
          best_gain = gain, pick = &s;
        } else if (gain > second_gain) {
          second_gain = gain, second = &s;
        }
      }
      if (!pick) return "every workload is done (exhausted, converged or given up)";
      go = give_round(*pick, second);
    }
    return "";
  }

  /// Why the run ended, each workload's fastest candidates confirmed (none after a stop), and
  /// the summaries.
  void finish(std::string reason) {
    const Clock::time_point ending = Clock::now();
    if (stop_requested()) {
      out_.stopped = true;
      reason = "stopped by the user";
    } else if (out_of_time()) {
      reason = "time budget reached";
    } else if (reason.empty()) {
      reason = "trial budget reached";
    }
    out_.stop_reason = reason;
    gpus_.deliver_all();  // the last measurements, recorded before the confirmations
    share_new_bests();
    for (Slot& s : slots_) s.task->confirm(gpus_);
    for (Slot& s : slots_) {
      s.result.summary = s.task->summary();
      out_.measured += s.result.summary.measured;
      out_.tasks.push_back(s.result);
    }
    // Every task's compiling ends at once: destroyed one after another, each waited for its own
    // running compiles while the others' queued ones kept the compile workers busy.
    const Clock::time_point compiles = Clock::now();
    for (Slot& s : slots_) s.task->abandon();
    for (Slot& s : slots_) s.task.reset();  // compiles in workers are killed; in-process ones awaited
    out_.finish_compile_s = seconds_since(compiles);
    out_.finish_s = seconds_since(ending);
    out_.wall_s = seconds_since(t0_);
  }

  const ModelTuneOptions& o_;
  TuneOptions base_;
  MeasurePool& gpus_;
  const Clock::time_point t0_ = Clock::now();
  int batch_ = 1;
  CostModel model_;
  std::unique_ptr<LogWriter> log_;
  std::vector<Slot> slots_;
  ModelTuneSummary out_;
};

}  // namespace

ModelTuneSummary tune_model(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws,
                            const ModelTuneOptions& o, MeasurePool& gpus) {
  if (o.trials <= 0 && o.time_budget_s <= 0) throw InternalError("tune_model needs a trial or a time budget");
  return ModelScheduler(o, gpus).run(tasks, hws);
}

ModelTuneSummary tune_model(const std::vector<ModelTask>& tasks, const std::vector<HwAbstraction>& hws,
                            const ModelTuneOptions& o, Measurer& measurer) {
  MeasurePool gpus({&measurer});
  return tune_model(tasks, hws, o, gpus);
}

}  // namespace tmap
