#include "tmap/tune/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "tmap/codegen/emitter.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/support/diagnostic.h"
#include "tmap/tune/cost_model.h"
#include "tmap/tune/range_looks.h"

namespace tmap {

TimingOptions tuning_timing(double min_total_ms) {
  TimingOptions t;
  t.warmup = 2;
  t.min_repeats = 5;
  t.min_total_ms = min_total_ms;
  t.graph_runs = 10;  // graph replay hides launch gaps; times are per run
  t.long_run_ms = 2;  // slow candidates: a few event-timed runs, within the timeout
  return t;
}

WorkerMeasurer::WorkerMeasurer(std::string binary, double timeout_seconds, TimingOptions timing, bool verify,
                               std::uint64_t seed, MeasureGpu gpu, std::shared_ptr<ReferenceBinaries> references)
    : gpu_(std::move(gpu)), worker_(std::move(binary), timeout_seconds, gpu_.index), timing_(timing), verify_(verify),
      seed_(seed), references_(std::move(references)), dir_("tmap_tune", "kernel binaries") {}

WorkerMeasurer::~WorkerMeasurer() = default;

MeasureResult WorkerMeasurer::measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams&,
                                      const KernelSource& k, const CompileResult& binary) {
  return measure_at(c, 0, g, k, binary);
}

bool RangeLooks::taken_near(const std::string& label, std::int64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::int64_t>& sizes = sizes_[label];
  for (std::int64_t s : sizes)
    if (s <= 2 * size && size <= 2 * s) return true;
  sizes.push_back(size);
  return false;
}

std::uint64_t workspace_seed(std::uint64_t seed, int workspace) {
  return seed + static_cast<std::uint64_t>(workspace) * 0x9E3779B97F4A7C15ull;  // far from the next run's seed
}

MeasureResult WorkerMeasurer::measure_at(const Compute& c, std::int64_t size, const ImplicitGemm& g,
                                         const KernelSource& k, const CompileResult& binary, int workspace) {
  if (size == 0) size = c.dynamic.at;  // a sample of a range runs at its size
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = dir_.path() + "/" + k.name + ".cubin";
  std::ofstream(path, std::ios::binary).write(binary.cubin.data(), static_cast<std::streamsize>(binary.cubin.size()));
  MeasureRequest req =
      MeasureRequest::for_kernel(c, k, path, c.inputs[g.a_input].tensor, c.inputs[g.b_input].tensor, size);
  req.verify = verify_;
  req.tolerance = verification_tolerance(*g.hw);
  req.timing = timing_;
  req.seed = workspace_seed(seed_, workspace);
  const auto t1 = std::chrono::steady_clock::now();
  if (verify_ && references_)
    req.reference_cubin_path = references_->path(size > 0 ? to_json(compute_at(c, size)) : req.compute);
  const auto t2 = std::chrono::steady_clock::now();
  MeasureResult r = worker_.measure(req);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  r.phases.reference_wait = seconds(t1, t2);
  r.phases.exchange = std::max(0.0, seconds(t0, std::chrono::steady_clock::now()) - r.phases.reference_wait -
                                        r.phases.in_worker());
  return r;
}

void WorkerMeasurer::prepare(const Compute& c) {
  if (verify_ && references_) references_->prepare(to_json(c.dynamic.at > 0 ? compute_at(c, c.dynamic.at) : c));
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The trials a run may measure: `o.trials`; with 0 as many as its time budget allows, or none
/// without one (a resumed run that only confirms).
int trial_cap(const TuneOptions& o) { return o.trials > 0 || o.time_budget_s <= 0 ? o.trials : 1 << 28; }
/// The least share of a batch's picks that the best arm so far gets (arm_shares).
constexpr double kBestArmShare = 0.25;
/// The most that the arms not yet measured share of a batch's picks (arm_shares).
constexpr double kExploreShare = 0.2;
/// Seeds kept per other workload of the logs: its fastest distinct schedules.
constexpr int kSeedsPerWorkload = 3;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Which GPU measured a result (its index and UUID, as every record names it).
void stamp_gpu(TuneResult& res, const Measurer& m) {
  const MeasureGpu on = m.gpu();
  res.gpu = on.index;
  res.gpu_uuid = on.uuid;
}

struct Candidate {
  int entry = -1;
  ScheduleParams params;
  Features features{};
};

/// What the search knows of one arm (mapping).
struct Arm {
  double best_us = kInf;       ///< Best correct measurement.
  double predicted_us = kInf;  ///< The model's estimate of its best candidate (first-look order).
  double share = 0;
  int measured = 0, failed = 0;
  bool looked = false;
  std::vector<std::pair<double, ScheduleParams>> population;  ///< Correct results, fastest first.
};

/// The state shared by tune() and rank_with_model().
class Search {
 public:
  Search(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o)
      : o_(o), space_(c, hws, o.enumeration, o.limits, o.compute_capability), workload_(make_workload(c)), rng_(o.seed) {
    if (space_.entries().empty())
      throw UserError(format_diagnostic(SourceLoc::whole(c.name),
                                        "'" + c.name + "' has nothing to tune on sm_" +
                                            std::to_string(o.compute_capability) + ": " + space_.empty_reason(),
                                        "see 'tmap map' for why each abstraction does not match"));
    arms_.resize(space_.entries().size());
  }

  const SearchSpace& space() const { return space_; }
  std::vector<Arm>& arms() { return arms_; }
  const Workload& workload() const { return workload_; }
  std::mt19937_64& rng() { return rng_; }

  Candidate candidate(int entry, const ScheduleParams& p) const {
    return {entry, p, candidate_features(space_.entries()[entry].gemm, p, o_.device)};
  }

  /// A pool of distinct, unseen candidates of one arm: samples, and mutations and crossovers of
  /// its best measured schedules.
  std::vector<Candidate> pool(int entry, int size) {
    std::vector<Candidate> out;
    std::set<std::string> keys;
    const auto& pop = arms_[entry].population;
    const std::size_t parents = std::min<std::size_t>(pop.size(), 8);
    auto add = [&](const ScheduleParams& p) {
      const std::string k = SearchSpace::key(entry, p);
      if (seen_.count(k) || !keys.insert(k).second) return;
      out.push_back(candidate(entry, p));
    };
    add(space_.entries()[entry].defaults);
    for (int i = 0; i < size * 2 && static_cast<int>(out.size()) < size; ++i) {
      const unsigned r = rng_() % 10;
      if (parents == 0 || r < 4) add(space_.sample(entry, rng_));
      else if (r < 8) add(space_.mutate(entry, pop[rng_() % parents].second, rng_));
      else add(space_.crossover(entry, pop[rng_() % parents].second, pop[rng_() % parents].second, rng_));
    }
    return out;
  }

  std::vector<double> predict(const CostModel& model, const std::vector<Candidate>& cs) const {
    std::vector<Features> f;
    for (const auto& x : cs) f.push_back(x.features);
    return model.predict(f);
  }

  void mark_seen(int entry, const ScheduleParams& p) { seen_.insert(SearchSpace::key(entry, p)); }
  bool seen(int entry, const ScheduleParams& p) const { return seen_.count(SearchSpace::key(entry, p)) > 0; }

  TuneRecord record(int entry, const ScheduleParams& p, TuneResult result) const {
    return make_record(workload_, o_.target, space_.ref(entry, p), std::move(result));
  }

 private:
  const TuneOptions& o_;
  SearchSpace space_;
  Workload workload_;
  std::vector<Arm> arms_;
  std::set<std::string> seen_;
  std::mt19937_64 rng_;
};

void note(const TuneOptions& o, const std::string& s) {
  if (o.on_note) o.on_note(s);
}

/// Compiles a batch on all cores; emitted on the calling thread.
struct CompiledBatch {
  std::vector<Candidate> candidates;
  std::vector<KernelSource> kernels;
  std::vector<CompileResult> binaries;
};

/// Compiles are cancelled once the user stops the run (`stop` may be null).
CompileCancelled stopped_by(const std::atomic<bool>* stop) {
  if (!stop) return {};
  return [stop] { return stop->load(); };
}

CompiledBatch compile_batch(const SearchSpace& space, NvrtcCompiler& compiler, std::vector<Candidate> batch,
                            unsigned threads, const CompileCancelled& cancelled) {
  CompiledBatch b;
  std::vector<CompileJob> jobs;
  for (const auto& c : batch) {
    b.kernels.push_back(emit_kernel(space.entries()[c.entry].gemm, c.params));
    jobs.push_back({b.kernels.back().name, b.kernels.back().code});
  }
  b.binaries = compile_parallel(compiler, jobs, threads, cancelled);
  b.candidates = std::move(batch);
  return b;
}

}  // namespace

void RunKeys::add(const std::string& key, const Compute& c) {
  own.insert(key);
  if (!c.epilogue.empty()) contraction[make_workload(contraction_of(c)).key].push_back(key);
}

std::vector<std::string> RunKeys::first_seeds_of(const std::string& key) const {
  std::vector<std::string> out;
  if (own.count(key)) out.push_back(key);
  if (auto it = contraction.find(key); it != contraction.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  return out;
}

LogHistory read_history(CostModel& model, const RunKeys& keys, const std::vector<HwAbstraction>& hws,
                        const TuneOptions& o) {
  // Transfer: correct measurements of other workloads on this architecture (in the log and the
  // prior logs) train the model before the first trial; on the H100 logs such a model ranks a
  // new workload's candidates with Spearman 0.64-0.95, the analytic model with 0.02-0.87.
  LogHistory h;
  std::vector<std::string> sources = o.prior_logs;
  if (!o.log_path.empty()) sources.push_back(o.log_path);
  for (const auto& source : sources) {
    LogContents contents = read_log(source);
    for (const auto& w : contents.warnings) note(o, "warning: " + w);
    // The log's records of this run's workloads are resumed; every other record (a prior log's
    // of this run's workloads too) trains the model.
    std::vector<TuneRecord> others;
    for (auto& r : contents.records) {
      if (r.target.arch != o.target.arch || !r.result.measured()) continue;
      if (keys.own.count(r.workload.key) && source == o.log_path) h.own[r.workload.key].push_back(std::move(r));
      else others.push_back(std::move(r));
    }
    // Seeds: each workload's fastest correct schedules; a prior log's of this run's own
    // workloads, and any log's of a fused workload's contraction alone (the same loops and
    // tiles: tuning a convolution, then its fused forms), go to that workload first.
    std::map<std::string, std::vector<const TuneRecord*>> fastest;
    for (const auto& r : others)
      if (r.result.ok()) fastest[r.workload.key].push_back(&r);
    for (auto& [key, group] : fastest) {
      std::stable_sort(group.begin(), group.end(), [](const TuneRecord* a, const TuneRecord* b) {
        return a->result.median_us < b->result.median_us;
      });
      const std::vector<std::string> first = keys.first_seeds_of(key);
      std::set<std::string> distinct;
      for (const TuneRecord* r : group) {
        if (static_cast<int>(distinct.size()) >= kSeedsPerWorkload) break;
        const std::string k = candidate_label(r->candidate) + to_json(r->candidate.params).dump();
        if (!distinct.insert(k).second) continue;
        if (first.empty()) h.seeds.push_back(r->candidate);
        for (const std::string& to : first) h.first_seeds[to].push_back(r->candidate);
      }
    }
    for (const auto& [key, set] : measured_sets(others, hws, o.target.arch, o.limits, o.device))
      for (std::size_t i = 0; i < set.features.size(); ++i) {
        model.add(set.features[i], set.times_us[i]);
        ++h.transferred;
      }
  }
  if (h.transferred) {
    model.fit();
    note(o, "cost model warm-started from " + std::to_string(h.transferred) + " measurements in the logs");
  }
  return h;
}

void TuneSummary::add_times(const TuneSummary& o) {
  measure_s += o.measure_s;
  compile_wait_s += o.compile_wait_s;
  propose_s += o.propose_s;
  record_s += o.record_s;
  fit_s += o.fit_s;
  worker += o.worker;
}

std::size_t first_look_limit(int arms, int batch, int trials, double budget_s, double elapsed_s, int measured) {
  double expected = trials;
  if (budget_s > 0 && 2 * arms < trials)
    expected = measured < batch || !(elapsed_s > 0) ? 2.0 * batch : std::min<double>(trials, measured * budget_s / elapsed_s);
  const auto n = static_cast<std::size_t>(std::max(0, arms));
  return 2 * n <= expected ? n : std::max<std::size_t>(std::min<double>(batch, expected), static_cast<std::size_t>(expected / 4));
}

namespace {

/// Not measured yet and not known to fail: ranked by the model's estimate.
bool unmeasured_arm(const ArmStanding& a) { return a.best_us == kInf && !a.failed_only; }

/// Measured arms: exp(-2 x log2(best / best overall)); arms that only failed a little.
/// Unmeasured ones on the same scale by the model's estimate against the best known time.
std::vector<double> arm_scores(const std::vector<ArmStanding>& arms, double global) {
  double predicted = kInf;
  for (const ArmStanding& a : arms)
    if (unmeasured_arm(a)) predicted = std::min(predicted, a.predicted_us);
  const double reference = std::min(global, predicted);
  auto closeness = [](double t, double ref) { return std::exp(-2.0 * std::log2(std::max(1.0, t / ref))); };
  std::vector<double> score(arms.size(), 0.0);
  for (std::size_t e = 0; e < arms.size(); ++e) {
    const ArmStanding& a = arms[e];
    if (a.best_us < kInf) score[e] = closeness(a.best_us, global);
    else if (a.failed_only) score[e] = 0.002;
    else if (a.predicted_us < kInf && reference < kInf) score[e] = std::max(1e-4, closeness(a.predicted_us, reference));
    else score[e] = 1e-4;
  }
  return score;
}

/// The model is often optimistic about mappings it has not seen: once some arm is measured, the
/// unmeasured ones together are capped at kExploreShare of the whole. Returns the scores' sum.
double cap_unmeasured(std::vector<double>& score, const std::vector<ArmStanding>& arms) {
  double measured = 0, unmeasured = 0;
  for (std::size_t e = 0; e < arms.size(); ++e) (unmeasured_arm(arms[e]) ? unmeasured : measured) += score[e];
  if (measured > 0 && unmeasured > 0) {
    const double cap = kExploreShare / (1 - kExploreShare) * measured;
    if (unmeasured > cap) {
      for (std::size_t e = 0; e < arms.size(); ++e)
        if (unmeasured_arm(arms[e])) score[e] *= cap / unmeasured;
      unmeasured = cap;
    }
  }
  return measured + unmeasured;
}

}  // namespace

std::vector<double> arm_shares(const std::vector<ArmStanding>& arms) {
  const std::size_t n = arms.size();
  if (n == 0) return {};
  double global = kInf;
  std::size_t best = 0;  // the fastest measured arm (meaningful when global < kInf)
  for (std::size_t e = 0; e < n; ++e)
    if (arms[e].best_us < global) global = arms[e].best_us, best = e;
  std::vector<double> score = arm_scores(arms, global);
  double total = cap_unmeasured(score, arms);
  // The best arm gets at least a quarter: among dozens of measured arms (a depthwise convolution
  // at batch 16 has about 190) the many that are 1.2-2x slower would otherwise outweigh it, and
  // under a time budget of a few seconds the winning arm would see one or two trials after its
  // first look.
  if (global < kInf && n > 1 && score[best] < kBestArmShare * total) {
    const double rest = total - score[best];
    score[best] = kBestArmShare / (1 - kBestArmShare) * rest;
    total = rest + score[best];
  }
  for (double& v : score) v /= total;
  return score;
}

namespace {

/// A candidate's kernel and its binary.
struct Compiled {
  KernelSource kernel;
  CompileResult binary;
};

/// The builder: batches of proposed candidates are emitted and compiled in the background on
/// all cores, each candidate ready on its own, so that whichever has compiled is measured next
/// and a batch's slowest kernel (1-9 s against 0.3 s on average on the H100) holds up no other.
class CompilePipeline {
 public:
  /// A proposed candidate, compiling or compiled, not yet measured.
  struct InFlight {
    Candidate candidate;
    std::shared_future<Compiled> compiled;
    double predicted = 0;        ///< log2 us, by the model when it was proposed
    bool model_trained = false;  ///< whether that model had been trained
  };

  CompilePipeline(const SearchSpace& space, const TuneOptions& o)
      : space_(space), o_(o), compiler_(o.compute_capability, o.compile_cache_dir) {}
  /// What was proposed but is not compiling yet is not compiled: the run has ended.
  ~CompilePipeline() {
    abandon();
    for (auto& f : compiling_) f.wait();  // compiled but never measured: nothing to record
  }
  /// Cancels what waits for a compile worker, without waiting for what compiles now.
  void abandon() { abandoned_ = true; }
  CompilePipeline(const CompilePipeline&) = delete;
  CompilePipeline& operator=(const CompilePipeline&) = delete;

  NvrtcCompiler& compiler() { return compiler_; }
  std::size_t size() const { return flight_.size(); }
  bool empty() const { return flight_.empty(); }

  /// Starts emitting and compiling `batch`; `predicted`: the model's estimate of each.
  void start(std::vector<Candidate> batch, const std::vector<double>& predicted, bool model_trained) {
    auto promises = std::make_shared<std::vector<std::promise<Compiled>>>(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i)
      flight_.push_back({batch[i], (*promises)[i].get_future().share(), predicted[i], model_trained});
    std::erase_if(compiling_, [](const std::future<void>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    compiling_.push_back(std::async(std::launch::async, [this, batch = std::move(batch), promises] {
      std::vector<KernelSource> kernels;
      std::vector<CompileJob> jobs;
      for (const Candidate& c : batch) {
        kernels.push_back(emit_kernel(space_.entries()[c.entry].gemm, c.params));
        jobs.push_back({kernels.back().name, kernels.back().code});
      }
      const CompileCancelled cancelled = [this] { return abandoned_.load() || (o_.stop && o_.stop->load()); };
      compile_parallel(compiler_, jobs, o_.compile_threads, cancelled, [&](std::size_t i, const CompileResult& r) {
        (*promises)[i].set_value({std::move(kernels[i]), r});
      });
    }));
  }

  /// The first candidate in flight whose compilation has finished, if any.
  std::optional<std::size_t> ready() const {
    for (std::size_t i = 0; i < flight_.size(); ++i)
      if (flight_[i].compiled.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return i;
    return std::nullopt;
  }

  /// The first candidate in flight whose compilation has finished, waiting for one.
  std::size_t wait_ready() {
    for (;;) {
      if (const auto i = ready()) return *i;
      flight_.front().compiled.wait_for(std::chrono::milliseconds(2));
    }
  }

  InFlight take(std::size_t at) {
    InFlight f = std::move(flight_[at]);
    flight_.erase(flight_.begin() + static_cast<std::ptrdiff_t>(at));
    return f;
  }

 private:
  const SearchSpace& space_;
  const TuneOptions& o_;
  NvrtcCompiler compiler_;
  std::deque<InFlight> flight_;
  std::vector<std::future<void>> compiling_;  ///< Batches being emitted and compiled.
  std::atomic<bool> abandoned_{false};
};

/// The task's view of the database (the log): the fastest correct candidates, held for
/// confirmation with their binaries when compiled in this run, and the confirmed records resumed
/// from the log that confirmation ranks them with.
class Podium {
 public:
  /// One of the fastest correct candidates: its latest record, and its binary when compiled in this run.
  struct Contender {
    TuneRecord rec;
    int entry;
    ScheduleParams params;
    std::shared_future<Compiled> compiled;
  };

  explicit Podium(int confirm_top) : keep_(2 * static_cast<std::size_t>(std::max(0, confirm_top))) {}

  std::vector<Contender>& contenders() { return podium_; }
  std::size_t size() const { return podium_.size(); }
  const std::optional<TuneRecord>& confirmed_best() const { return confirmed_best_; }

  /// The records of this workload in the log: the best by the log's rule (a confirmed record
  /// before faster single measurements), which it returns, and the latest record of each
  /// candidate that was confirmed and correct, in log order.
  std::optional<TuneRecord> resume(const std::vector<TuneRecord>& own, const SearchSpace& space) {
    std::optional<TuneRecord> best;
    if (const auto b = best_records(own, true); !b.empty() && space.find(b[0]->candidate) >= 0) {
      best = *b[0];
      if (b[0]->result.confirm_rounds) confirmed_best_ = *b[0];
    }
    std::map<std::string, const TuneRecord*> latest;
    for (const auto& r : own)
      if (r.result.measured() && space.find(r.candidate) >= 0) latest[candidate_signature(r.candidate)] = &r;
    std::vector<const TuneRecord*> kept;
    for (const auto& [sig, r] : latest)
      if (r->result.confirm_rounds && r->result.ok()) kept.push_back(r);
    std::sort(kept.begin(), kept.end());  // `own` is in log order
    for (const TuneRecord* r : kept) resumed_confirmed_.push_back(*r);
    return best;
  }

  /// Keeps the 2 x confirm_top fastest correct candidates (by their latest record).
  void contend(const TuneRecord& rec, int entry, const ScheduleParams& p, std::shared_future<Compiled> compiled) {
    if (keep_ == 0) return;
    const std::string key = SearchSpace::key(entry, p);
    std::erase_if(podium_, [&](const Contender& c) { return SearchSpace::key(c.entry, c.params) == key; });
    if (!rec.result.ok()) return;
    auto at = std::find_if(podium_.begin(), podium_.end(),
                           [&](const Contender& c) { return rec.result.median_us < c.rec.result.median_us; });
    if (at == podium_.end() && podium_.size() >= keep_) return;
    podium_.insert(at, {rec, entry, p, std::move(compiled)});
    if (podium_.size() > keep_) podium_.pop_back();
  }

  /// After the first `top` contenders were confirmed (their records replaced): the best by the
  /// log's own rule (best_records), the latest record of each candidate, ties to the earlier
  /// record. Confirmed records resumed from the log come first, except for the candidates
  /// confirmed again just now, whose new records (last in the log) replace them. The contenders
  /// are then ordered by their new records.
  std::optional<TuneRecord> rank_confirmed(int top) {
    std::set<std::string> again;
    for (int i = 0; i < top; ++i) again.insert(candidate_signature(podium_[i].rec.candidate));
    std::optional<TuneRecord> best;
    for (const TuneRecord& r : resumed_confirmed_)
      if (!again.count(candidate_signature(r.candidate)) && (!best || ranks_before(r, *best))) best = r;
    for (const Contender& c : podium_)
      if (c.rec.result.ok() && (!best || ranks_before(c.rec, *best))) best = c.rec;
    std::stable_sort(podium_.begin(), podium_.end(), [](const Contender& a, const Contender& b) {
      return a.rec.result.ok() && (!b.rec.result.ok() || a.rec.result.median_us < b.rec.result.median_us);
    });
    return best;
  }

 private:
  std::size_t keep_;
  std::vector<Contender> podium_;  ///< Fastest first.
  std::optional<TuneRecord> confirmed_best_;   ///< Resumed.
  std::vector<TuneRecord> resumed_confirmed_;  ///< The latest record of each, in log order.
};

/// The search strategy: which candidates are measured next. First looks at each arm (the model's
/// best candidate of it), then seeds offered by other workloads, then each arm's share of a
/// batch (arm_shares), filled with the model's best of samples, mutations and crossovers.
class SearchStrategy {
 public:
  SearchStrategy(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o)
      : o_(o), search_(c, hws, o) {}

  Search& search() { return search_; }
  const Search& search() const { return search_; }
  int first_looks_taken() const { return first_looks_taken_; }

  /// Each arm's best candidate by the model, arms in the model's order; as many as a quarter of
  /// the trials allow (or, with a time budget, as its pace will allow: look_limit()).
  void plan_first_looks(const CostModel& model) {
    auto& arms = search_.arms();
    const int n = static_cast<int>(arms.size());
    std::vector<std::pair<double, Candidate>> best_per_arm;
    for (int e = 0; e < n; ++e) {
      if (arms[e].looked) continue;
      std::vector<Candidate> pool = search_.pool(e, 12);
      if (pool.empty()) continue;
      std::vector<double> pred = search_.predict(model, pool);
      const std::size_t i = std::min_element(pred.begin(), pred.end()) - pred.begin();
      arms[e].predicted_us = std::exp2(pred[i]);
      best_per_arm.emplace_back(pred[i], pool[i]);
    }
    std::sort(best_per_arm.begin(), best_per_arm.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& look : best_per_arm) first_looks_.push_back(look.second);
    if (o_.time_budget_s > 0 && trial_cap(o_) > 2 * n) {
      note(o_, std::to_string(n) + " mappings to search; a first look for the model's best, as many as a quarter of "
                                   "the trials the time budget allows");
    } else {
      first_looks_.resize(std::min(first_looks_.size(), first_look_limit(n, o_.batch, trial_cap(o_), 0, 0, 0)));
      note(o_, std::to_string(n) + " mappings to search; a first look for " + std::to_string(first_looks_.size()) +
                   (first_looks_.size() < best_per_arm.size() ? " (the model's best)" : ""));
    }
  }

  /// Another workload's schedule, kept as a seed when this space has its mapping, the schedule
  /// is valid here and it was neither tried nor offered before; `first`: this workload's own
  /// from a prior log, measured before anything else. The same schedule on the mapping's relayout
  /// twins is offered too (a first layer's best at 16-byte rows is a fair guess at 8-byte rows);
  /// first only for the fastest of a prior log's, so that a prior log costs few extra trials.
  bool offer(const CandidateRef& r, bool first) {
    const SearchSpace& space = search_.space();
    const int e = space.find(r);
    if (e < 0) return false;
    const bool twins_first = first && first_offers_++ == 0;
    bool kept = space.valid(e, r.params) && keep(e, r.params, first);
    for (const auto& [twin, p] : space.twins(e, r.params)) kept = keep(twin, p, twins_first) || kept;
    return kept;
  }
  bool is_seed(int entry, const ScheduleParams& p) const { return seed_keys_.count(SearchSpace::key(entry, p)) > 0; }

  /// A measurement of arm `entry`: its standing, its population, and a sample for the model.
  void learn(int entry, const ScheduleParams& p, const TuneResult& res, CostModel& model) {
    Arm& arm = search_.arms()[entry];
    arm.looked = true;
    if (!res.ok()) {
      ++arm.failed;
      return;
    }
    ++arm.measured;
    arm.best_us = std::min(arm.best_us, res.median_us);
    arm.population.emplace_back(res.median_us, p);
    std::sort(arm.population.begin(), arm.population.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    model.add(search_.candidate(entry, p).features, res.median_us);
  }

  /// The next `size` candidates, none seen before: seeds first (at most a quarter), then first
  /// looks (the whole first batch, half of later ones, within `look_limit`), then the arms'
  /// shares. `best`: this workload's best record, which a seed must come within 2x of.
  std::vector<Candidate> propose(int size, const CostModel& model, const std::optional<TuneRecord>& best,
                                 std::size_t look_limit) {
    std::vector<Candidate> out;
    for (const Candidate& c : first_seeds_)
      if (static_cast<int>(out.size()) < size && !search_.seen(c.entry, c.params)) {
        search_.mark_seen(c.entry, c.params);
        seed_keys_.insert(SearchSpace::key(c.entry, c.params));
        out.push_back(c);
      }
    std::erase_if(first_seeds_, [&](const Candidate& c) { return search_.seen(c.entry, c.params); });
    take_seeds(out, std::max(1, size / 4), model, best);
    // Later batches keep half their slots for the arms that have proven good, so that
    // exploitation starts before every arm has been looked at.
    const int looks = next_look_ == 0 ? size : std::max(1, size / 2);
    const std::size_t limit = std::min(look_limit, first_looks_.size());
    while (static_cast<int>(out.size()) < looks && next_look_ < limit) {
      const Candidate& c = first_looks_[next_look_++];
      if (!search_.seen(c.entry, c.params) && !taken_near(c.entry)) {
        search_.mark_seen(c.entry, c.params);
        out.push_back(c);
        ++first_looks_taken_;
      }
    }
    if (static_cast<int>(out.size()) < size) by_arm_shares(out, size, model);
    return out;
  }

 private:
  /// Whether another sample of this range, near its size, gave arm `entry` its first look (if
  /// none did, this sample's look is noted for the others: RangeLooks::taken_near).
  bool taken_near(int entry) {
    if (!o_.range_looks) return false;
    const SearchSpace& space = search_.space();
    return o_.range_looks->taken_near(space.entries()[entry].label, space.compute().dynamic.at);
  }

  bool keep(int entry, const ScheduleParams& p, bool first) {
    if (search_.seen(entry, p) || !offered_.insert(SearchSpace::key(entry, p)).second) return false;
    (first ? first_seeds_ : seeds_).push_back(search_.candidate(entry, p));
    return true;
  }

  /// Up to `n` seeds not yet tried, the model's best first, into `out`; once this workload has a
  /// kernel, only seeds the model rates within 2x of it (the rest wait: the model may change).
  void take_seeds(std::vector<Candidate>& out, int n, const CostModel& model, const std::optional<TuneRecord>& best) {
    std::erase_if(seeds_, [&](const Candidate& c) { return search_.seen(c.entry, c.params); });
    if (seeds_.empty() || n <= 0) return;
    const std::vector<double> pred = search_.predict(model, seeds_);
    std::vector<std::size_t> order(seeds_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pred[a] < pred[b]; });
    const double limit = best && model.trained() ? std::log2(best->result.median_us) + 1 : kInf;
    for (std::size_t i = 0; i < order.size() && static_cast<int>(out.size()) < n && pred[order[i]] <= limit; ++i) {
      const Candidate& c = seeds_[order[i]];
      search_.mark_seen(c.entry, c.params);
      seed_keys_.insert(SearchSpace::key(c.entry, c.params));
      out.push_back(c);
    }
    std::erase_if(seeds_, [&](const Candidate& c) { return search_.seen(c.entry, c.params); });
  }

  /// Arms' shares (arm_shares), with momentum.
  void update_shares() {
    auto& arms = search_.arms();
    std::vector<ArmStanding> standing;
    standing.reserve(arms.size());
    for (const auto& a : arms) standing.push_back({a.best_us, a.predicted_us, a.best_us == kInf && a.failed > 0});
    const std::vector<double> share = arm_shares(standing);
    for (std::size_t e = 0; e < arms.size(); ++e) arms[e].share = 0.5 * arms[e].share + 0.5 * share[e];
  }

  /// Fills `out` up to `size`: each slot drawn among the arms by their shares, each arm's slots
  /// given the model's best of a pool (or, with probability `explore`, a random member of it).
  void by_arm_shares(std::vector<Candidate>& out, int size, const CostModel& model) {
    update_shares();
    std::vector<double> weights;
    for (const auto& a : search_.arms()) weights.push_back(a.share);
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    std::map<int, int> slots;
    for (int i = static_cast<int>(out.size()); i < size; ++i) ++slots[pick(search_.rng())];
    for (const auto& [entry, count] : slots) {
      std::vector<Candidate> pool = search_.pool(entry, 16 * count + 32);
      if (pool.empty()) continue;
      std::vector<double> pred = search_.predict(model, pool);
      std::vector<std::size_t> order(pool.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pred[a] < pred[b]; });
      std::set<std::size_t> taken;
      for (int k = 0; k < count && taken.size() < pool.size(); ++k) {
        std::size_t choice = order[0];
        const bool explore = std::uniform_real_distribution<double>(0, 1)(search_.rng()) < o_.explore;
        if (explore) {
          do choice = search_.rng()() % pool.size();
          while (taken.count(choice));
        } else {
          for (std::size_t i : order)
            if (!taken.count(i)) {
              choice = i;
              break;
            }
        }
        taken.insert(choice);
        search_.mark_seen(pool[choice].entry, pool[choice].params);
        out.push_back(pool[choice]);
      }
    }
  }

  const TuneOptions& o_;
  Search search_;
  std::vector<Candidate> first_looks_;
  std::size_t next_look_ = 0;
  int first_looks_taken_ = 0;
  std::vector<Candidate> seeds_;               ///< Offered, not yet tried.
  std::vector<Candidate> first_seeds_;         ///< Offered first (this workload's, from a prior log).
  std::set<std::string> offered_, seed_keys_;  ///< SearchSpace::key of every offer / of those tried.
  int first_offers_ = 0;                       ///< Calls of offer() with `first`.
};

}  // namespace

/// One workload's search between runs, along the lines MetaSchedule draws: the search strategy
/// proposes, the builder compiles, the runner (a Measurer) measures, the cost model learns, and
/// the database (the log, and the podium confirmation ranks) keeps every record.
class TuneTask::Impl : public MeasureClient {
 public:
  Impl(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, CostModel& model,
       const std::vector<TuneRecord>& own, LogWriter* log)
      : c_(c), o_(o), strategy_(c, hws, o_), model_(model), log_(log),
        flops_(strategy_.search().workload().description["flops"].get<double>()), podium_(o_.confirm_top),
        pipeline_(strategy_.search().space(), o_) {
    s_.arms = static_cast<int>(strategy_.search().arms().size());
    resume(own);
    strategy_.plan_first_looks(model_);
  }

  void run(int trials, MeasurePool& gpus, const std::function<bool()>& out_of_time, RunEnd end) {
    try {
      measure_trials(trials, gpus, out_of_time, end);
    } catch (...) {
      gpus.abandon_all();  // the measurements in flight read this task's space (and others')
      throw;
    }
  }

  /// A measurement of this task has finished (collected by this task's run or another's).
  void measured(MeasurePool::Done d, MeasurePool& gpus) override {
    const auto t0 = Clock::now();
    finish_measurement(std::move(d), gpus);
    s_.record_s += seconds_since(t0);
    if (fit_due()) fit();
  }

  int in_flight() const { return static_cast<int>(measuring_.size()); }

  /// Waits for what measure_trials looks at next: with no GPU busy, a compile (nullopt;
  /// `nothing_in_flight` when nothing compiles either); else a measurement, looking at the
  /// compiles again every 2 ms while an idle GPU `wants` a candidate. Time a GPU waits on
  /// compiles goes to compile_wait_s.
  std::optional<MeasurePool::Done> wait(MeasurePool& gpus, bool wants, bool& nothing_in_flight) {
    const auto waited = Clock::now();
    if (gpus.in_flight() == 0) {
      nothing_in_flight = pipeline_.empty();
      if (!nothing_in_flight) {
        pipeline_.wait_ready();
        s_.compile_wait_s += gpus.size() * seconds_since(waited);
      }
      return std::nullopt;
    }
    const bool poll = wants && !pipeline_.empty();
    const std::size_t idle = gpus.idle();
    std::optional<MeasurePool::Done> done = gpus.collect(poll ? 0.002 : -1);
    if (poll) s_.compile_wait_s += idle * seconds_since(waited);
    return done;
  }

  void measure_trials(int trials, MeasurePool& gpus, const std::function<bool()>& out_of_time, RunEnd end) {
    const auto t0 = Clock::now();
    run_start_ = t0;
    if (!prepared_) gpus.prepare(c_);  // the reference compiles while the first batch does
    prepared_ = true;
    const int target = s_.measured + in_flight() + trials;  // the previous run's last may be in flight
    s_.stop_reason.clear();
    // Up to compile_ahead batches per GPU are in flight, and whichever kernel has compiled is
    // measured next, on whichever GPU is free. A run plans up to one batch beyond its own trials;
    // what it leaves compiling waits for the next.
    const int ahead = std::max(1, o_.compile_ahead) * o_.batch * static_cast<int>(gpus.size());
    auto fill = [&](bool first) {
      while (!exhausted_ && static_cast<int>(pipeline_.size()) < ahead && planned_ < target + o_.batch &&
             (first || (!stop_requested() && !out_of_time())))
        start_compile(std::min(o_.batch, target + o_.batch - planned_));
    };
    bool ending = dispatch(gpus, target, fill);  // what was compiled ahead starts before anything is proposed
    fill(true);
    for (;;) {
      if (!ending) ending = dispatch(gpus, target, fill);
      bool started_all = ending || s_.measured + in_flight() >= target;
      if (!started_all && pipeline_.empty() && exhausted_) {
        s_.stop_reason = "the search space is exhausted";
        started_all = true;
      }
      if (started_all && (end == RunEnd::kAllStarted || measuring_.empty())) break;
      bool nothing_in_flight = false;
      std::optional<MeasurePool::Done> done = wait(gpus, !started_all && gpus.idle() > 0, nothing_in_flight);
      if (nothing_in_flight) break;
      if (!done) continue;
      // The GPU starts its next candidate before this result is recorded and the budget looked at
      // (the caller's check may propose another workload's batch): a GPU measures at most one
      // candidate past the budget, and never waits on the host.
      if (!ending) ending = dispatch(gpus, target, fill);
      gpus.deliver(std::move(*done));
      if (ending) continue;
      if (const std::string reason = why_stop(out_of_time); !reason.empty()) {
        s_.stop_reason = reason;
        ending = true;
      }
    }
    if (fit_due()) fit();
    close_rank_window();  // what a refit still running left open is ranked too
    if (s_.stop_reason.empty()) s_.stop_reason = "trial budget reached";
    s_.wall_s += seconds_since(t0);
  }

  void confirm(MeasurePool& gpus) {
    const int top = std::min(o_.confirm_top, static_cast<int>(podium_.size()));
    if (top < 1 || o_.confirm_rounds < 1 || stop_requested()) {
      // Nothing confirmed in this run: a confirmed record resumed from the log outranks the
      // single measurements of this run, as in best_records.
      if (podium_.confirmed_best() && s_.best && !s_.best->result.confirm_rounds) s_.best = podium_.confirmed_best();
      return;
    }
    const auto t0 = Clock::now();
    const std::vector<Compiled> bins = contender_binaries(top);
    s_.unconfirmed_best_us = s_.best ? s_.best->result.median_us : 0;
    const std::vector<TuneResult> results = measure_in_rounds(bins, gpus);
    for (int i = 0; i < top; ++i) {
      Podium::Contender& c = podium_.contenders()[i];
      c.rec = strategy_.search().record(c.entry, c.params, results[i]);
      if (log_) log_->append(c.rec);
    }
    s_.confirmed = top;
    s_.best = podium_.rank_confirmed(top);
    const double took = seconds_since(t0);
    s_.confirm_s += took;
    s_.wall_s += took;
  }

  /// What confirm() will take: its measurements at this task's typical time per measurement,
  /// the median of those after the first. The first also starts the measuring worker, its CUDA
  /// context and the workload's inputs and reference (on the H100, about 4 s before a ResNet-18
  /// batch-256 layer's 0.5 s measurements): taken as typical, it reserved about 50 s for
  /// confirmations and ended 25 s budgets after one to four trials. Until a second one, 0.05 s.
  double confirm_seconds() const {
    const int top = std::min(o_.confirm_top, static_cast<int>(podium_.size()));
    if (top < 1 || o_.confirm_rounds < 1) return 0;
    return top * o_.confirm_rounds * typical_measure_s();
  }

  /// The median measurement after the first (0.05 s until there are two). Model-level tuning
  /// asks after every measurement for every workload: it is recomputed only when it has changed.
  double typical_measure_s() const {
    if (measure_durations_.size() < 2) return 0.05;
    if (typical_of_ != measure_durations_.size()) {
      std::vector<double> later(measure_durations_.begin() + 1, measure_durations_.end());
      std::nth_element(later.begin(), later.begin() + later.size() / 2, later.end());
      typical_ = later[later.size() / 2];
      typical_of_ = measure_durations_.size();
    }
    return typical_;
  }

  bool offer(const CandidateRef& r, bool first) {
    if (!strategy_.offer(r, first)) return false;
    ++s_.offered;
    return true;
  }

  /// Starts compiling one batch for the next run, unless candidates are compiling or compiled already.
  void prefetch() {
    if (pipeline_.empty() && !exhausted_ && !stop_requested()) start_compile(o_.batch);
  }

  void abandon() { pipeline_.abandon(); }

  const Workload& workload() const { return strategy_.search().workload(); }

  TuneSummary s_;
  bool exhausted_ = false;

 private:
  bool stop_requested() const { return o_.stop && o_.stop->load(); }

  /// Why the run ends after a measurement ("" to go on).
  std::string why_stop(const std::function<bool()>& out_of_time) {
    if (stop_requested()) {
      s_.stopped = true;
      return "stopped by the user";
    }
    if (out_of_time()) return "time budget reached";
    if (o_.early_stop > 0 && since_improvement_ >= o_.early_stop)
      return "no improvement in " + std::to_string(since_improvement_) + " trials";
    return "";
  }

  /// Records of this workload on this architecture warm the model and are not measured again.
  void resume(const std::vector<TuneRecord>& own) {
    Search& search = strategy_.search();
    for (const auto& r : own) {
      const int entry = search.space().find(r.candidate);
      if (entry < 0) continue;
      search.mark_seen(entry, r.candidate.params);
      strategy_.learn(entry, r.candidate.params, r.result, model_);
      consider_best(r);
      podium_.contend(r, entry, r.candidate.params, {});
      ++s_.resumed;
    }
    if (auto best = podium_.resume(own, search.space())) s_.best = std::move(best);
    if (s_.resumed) {
      model_.fit();
      note(o_, "resuming from " + std::to_string(s_.resumed) + " records in " + o_.log_path +
                   (s_.best ? ", best " + std::to_string(s_.best->result.median_us) + " us" : ""));
    }
  }

  bool consider_best(const TuneRecord& r) {
    if (r.result.ok() && (!s_.best || r.result.median_us < s_.best->result.median_us)) {
      s_.best = r;
      return true;
    }
    return false;
  }

  /// The first looks this run may take so far.
  std::size_t look_limit() const {
    return first_look_limit(s_.arms, o_.batch, trial_cap(o_), o_.time_budget_s, seconds_since(created_), s_.measured);
  }

  /// Proposes a batch and starts compiling it; each candidate is ready on its own.
  void start_compile(int size) {
    const auto t0 = Clock::now();
    std::vector<Candidate> batch = strategy_.propose(size, model_, s_.best, look_limit());
    s_.first_looks = strategy_.first_looks_taken();
    s_.propose_s += seconds_since(t0);
    if (batch.empty()) {
      exhausted_ = true;
      return;
    }
    planned_ += static_cast<int>(batch.size());
    const std::vector<double> predicted = strategy_.search().predict(model_, batch);
    pipeline_.start(std::move(batch), predicted, model_.trained());
  }

  /// Starts compiled candidates on the free GPUs, up to the run's target; a candidate that did not
  /// compile is recorded at once. True when the user asked to stop (nothing more starts).
  bool dispatch(MeasurePool& gpus, int target, const std::function<void(bool)>& fill) {
    bool took = false;
    for (; s_.measured + static_cast<int>(measuring_.size()) < target && gpus.idle() > 0; took = true) {
      const std::optional<std::size_t> at = pipeline_.ready();
      if (!at) break;
      if (stop_requested()) {  // compilations may have been cancelled: measure and record none of them
        s_.stopped = true;
        s_.stop_reason = "stopped by the user";
        return true;
      }
      CompilePipeline::InFlight f = pipeline_.take(*at);
      if (f.compiled.get().binary.cancelled) continue;  // not a failure: not recorded
      if (!f.compiled.get().binary.ok) {
        TuneResult res = result_before_measuring(f);
        res.status = "compile_error";
        res.error = "generated kernel does not compile (a bug in tmap): " + f.compiled.get().binary.log.substr(0, 2000);
        record(f, res, -1, gpus);
        continue;
      }
      const std::uint64_t tag = next_tag_++;
      const ImplicitGemm& g = strategy_.search().space().entries()[f.candidate.entry].gemm;
      gpus.submit(
          tag,
          [this, &g, params = f.candidate.params, compiled = f.compiled](Measurer& m) {
            return m.measure(c_, g, params, compiled.get().kernel, compiled.get().binary);
          },
          this);
      measuring_.emplace(tag, std::move(f));
    }
    if (took) fill(false);  // proposing more overlaps the measurements just started
    return false;
  }

  TuneResult result_before_measuring(const CompilePipeline::InFlight& f) const {
    TuneResult res;
    res.estimated_us = std::exp2(f.predicted);
    res.compile_seconds = f.compiled.get().binary.seconds;
    return res;
  }

  /// A measurement has finished on `d.gpu`: records it.
  void finish_measurement(MeasurePool::Done d, MeasurePool& gpus) {
    auto it = measuring_.find(d.tag);
    if (it == measuring_.end()) throw InternalError("a measurement of another task came back");
    const CompilePipeline::InFlight f = std::move(it->second);
    measuring_.erase(it);
    measure_durations_.push_back(d.seconds);
    s_.measure_s += d.seconds;
    s_.worker += d.result.phases;
    TuneResult res = result_before_measuring(f);
    res.status = status_name(d.result.status);
    res.median_us = d.result.median_us;
    res.times_us = d.result.times_us;
    res.rel_l2 = d.result.rel_l2;
    if (d.result.status != MeasureStatus::kOk) res.error = d.result.message;
    record(f, res, static_cast<int>(d.gpu), gpus);
  }

  /// Records a trial, and lets the strategy, the model and the podium learn from it.
  void record(const CompilePipeline::InFlight& f, TuneResult res, int gpu, MeasurePool& gpus) {
    const Candidate& cand = f.candidate;
    if (gpu >= 0) stamp_gpu(res, gpus.measurer(gpu));
    TuneRecord rec = strategy_.search().record(cand.entry, cand.params, res);
    if (log_) log_->append(rec);
    ++s_.measured;
    const bool seed = strategy_.is_seed(cand.entry, cand.params);
    s_.seeded += seed;
    strategy_.learn(cand.entry, cand.params, res, model_);
    if (!res.ok()) ++s_.failed;
    else if (f.model_trained) {
      pred_ok_.push_back(f.predicted);
      meas_ok_.push_back(std::log2(res.median_us));
    }
    if (res.ok()) podium_.contend(rec, cand.entry, cand.params, f.compiled);
    if (consider_best(rec)) {
      s_.seed_wins += seed;
      since_improvement_ = 0;
      s_.history.emplace_back(s_.resumed + s_.measured, rec.result.median_us);
    } else {
      ++since_improvement_;
    }
    if (gpu >= 0) gpus.label(gpu, c_.name, s_.best && s_.best->result.ok() ? s_.best->result.median_us : 0);
    report_progress(cand, f.model_trained, gpus);
  }

  void report_progress(const Candidate& cand, bool model_trained, const MeasurePool& gpus) const {
    if (!o_.on_progress) return;
    TuneProgress p;
    p.trials = s_.measured;
    p.total = o_.trials;
    if (s_.best) {
      p.best_us = s_.best->result.median_us;
      p.best_tflops = flops_ / (p.best_us * 1e-6) / 1e12;
    }
    p.arm = strategy_.search().space().entries()[cand.entry].label;
    p.elapsed_s = s_.wall_s + seconds_since(run_start_);
    p.eta_s = p.elapsed_s / s_.measured * std::max(0, trial_cap(o_) - s_.measured);
    if (o_.time_budget_s > 0) p.eta_s = std::min(p.eta_s, std::max(0.0, o_.time_budget_s - p.elapsed_s));
    p.rank_correlation = s_.rank_correlations.empty() ? 0 : s_.rank_correlations.back();
    p.model_trained = model_trained;
    p.gpus = &gpus;
    o_.on_progress(p);
  }

  /// The binaries of the first `top` contenders: those measured in this run are at hand,
  /// resumed ones are compiled again.
  std::vector<Compiled> contender_binaries(int top) {
    std::vector<Compiled> bins(top);
    std::vector<Candidate> resumed;
    std::vector<int> missing;
    for (int i = 0; i < top; ++i) {
      const Podium::Contender& c = podium_.contenders()[i];
      if (c.compiled.valid()) {
        bins[i] = c.compiled.get();
        continue;
      }
      resumed.push_back(strategy_.search().candidate(c.entry, c.params));
      missing.push_back(i);
    }
    if (!resumed.empty()) {
      CompiledBatch b = compile_batch(strategy_.search().space(), pipeline_.compiler(), std::move(resumed),
                                      o_.compile_threads, stopped_by(o_.stop));
      for (std::size_t j = 0; j < missing.size(); ++j) bins[missing[j]] = {std::move(b.kernels[j]), b.binaries[j]};
    }
    return bins;
  }

  /// Measures each contender in confirm_rounds rounds in turn, so that a drift of the GPU falls
  /// on every candidate alike; each result is the median of its rounds' medians.
  std::vector<TuneResult> measure_in_rounds(const std::vector<Compiled>& bins, MeasurePool& gpus) {
    const std::size_t top = bins.size();
    std::vector<std::vector<double>> medians(top), times(top);
    std::vector<MeasureResult> last(top);
    std::vector<bool> failed(top, false);
    std::vector<std::string> status(top);
    for (int round = 0; round < o_.confirm_rounds; ++round)
      for (std::size_t i = 0; i < top; ++i) {
        if (failed[i]) continue;
        if (!bins[i].binary.ok) {
          failed[i] = true;
          status[i] = "compile_error";
          last[i].message = "generated kernel does not compile (a bug in tmap): " + bins[i].binary.log.substr(0, 2000);
          continue;
        }
        const Podium::Contender& c = podium_.contenders()[i];
        const ImplicitGemm& g = strategy_.search().space().entries()[c.entry].gemm;
        MeasurePool::Done d = gpus.run_on(0, [&](Measurer& m) { return m.measure(c_, g, c.params, bins[i].kernel, bins[i].binary); });
        last[i] = std::move(d.result);
        s_.measure_s += d.seconds;
        s_.worker += last[i].phases;
        if (last[i].status != MeasureStatus::kOk) {
          failed[i] = true;
          continue;
        }
        medians[i].push_back(last[i].median_us);
        times[i].insert(times[i].end(), last[i].times_us.begin(), last[i].times_us.end());
      }
    std::vector<TuneResult> out(top);
    for (std::size_t i = 0; i < top; ++i) {
      TuneResult& res = out[i];
      res.confirm_rounds = o_.confirm_rounds;
      res.estimated_us = podium_.contenders()[i].rec.result.estimated_us;
      res.status = status[i].empty() ? status_name(last[i].status) : status[i];
      stamp_gpu(res, gpus.measurer(0));
      if (!failed[i]) {
        std::sort(medians[i].begin(), medians[i].end());
        const std::size_t n = medians[i].size();
        res.median_us = n % 2 ? medians[i][n / 2] : 0.5 * (medians[i][n / 2 - 1] + medians[i][n / 2]);
        res.times_us = std::move(times[i]);
        res.rel_l2 = last[i].rel_l2;
      } else {
        res.error = "confirmation: " + last[i].message;
      }
    }
    return out;
  }

  /// Whether the (possibly shared) model has enough new samples to refit: a batch's worth, and
  /// later a thirty-second of what it has, since a fit's cost grows with its samples (on the H100,
  /// refitting after every batch took 77 of ResNet-50's 180 s once compiling kept up).
  bool fit_due() const { return model_.unfitted() >= std::max(o_.batch, model_.samples() / 32); }

  /// Refits the model on everything measured; the rank correlation of this task's measurements
  /// since its last fit against the model's predictions when they were proposed (held out).
  /// Once the model exists, refits run in the background while candidates are measured (they
  /// took 3-4 s of a 20 s run on the H100 when the search waited for them); while one runs,
  /// the next waits for it to end.
  void fit() {
    if (model_.fitting()) return;
    close_rank_window();
    const auto t0 = Clock::now();
    model_.fit_in_background();
    s_.fit_s += seconds_since(t0);
  }

  /// Ends the window of held-out predictions: its rank correlation is recorded once it holds
  /// enough correct measurements to rank (four).
  void close_rank_window() {
    if (pred_ok_.size() >= 4) s_.rank_correlations.push_back(spearman(pred_ok_, meas_ok_));
    pred_ok_.clear();
    meas_ok_.clear();
  }

  const Compute& c_;
  const TuneOptions o_;
  SearchStrategy strategy_;  ///< Holds the search space, which the pipeline's compilations read.
  CostModel& model_;
  LogWriter* log_;
  double flops_;
  Podium podium_;
  CompilePipeline pipeline_;  ///< Last: destroyed first, once its compilations are done.
  int planned_ = 0, since_improvement_ = 0;
  bool prepared_ = false;  ///< The pool's measurers got ready for this compute (MeasurePool::prepare).
  std::vector<double> measure_durations_;  ///< Seconds of each measurement of a candidate, in order.
  mutable double typical_ = 0;             ///< typical_measure_s() of the first typical_of_ of them.
  mutable std::size_t typical_of_ = 0;
  std::vector<double> pred_ok_, meas_ok_;  ///< Of correct ones since the last fit (log2 us).
  std::map<std::uint64_t, CompilePipeline::InFlight> measuring_;  ///< On a GPU now, by the pool's tag.
  std::uint64_t next_tag_ = 1;
  Clock::time_point run_start_ = Clock::now();
  const Clock::time_point created_ = Clock::now();  ///< The time budget counts from here.
};

TuneTask::TuneTask(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, CostModel& model,
                   const std::vector<TuneRecord>& own, LogWriter* log)
    : impl_(std::make_unique<Impl>(c, hws, o, model, own, log)) {}
TuneTask::~TuneTask() = default;
void TuneTask::run(int trials, MeasurePool& gpus, const std::function<bool()>& out_of_time, RunEnd end) {
  impl_->run(trials, gpus, out_of_time, end);
}
int TuneTask::in_flight() const { return impl_->in_flight(); }
void TuneTask::prefetch() { impl_->prefetch(); }
void TuneTask::abandon() { impl_->abandon(); }
bool TuneTask::offer(const CandidateRef& seed, bool first) { return impl_->offer(seed, first); }
void TuneTask::confirm(MeasurePool& gpus) { impl_->confirm(gpus); }
double TuneTask::confirm_seconds() const { return impl_->confirm_seconds(); }
const TuneSummary& TuneTask::summary() const { return impl_->s_; }
bool TuneTask::exhausted() const { return impl_->exhausted_; }
const Workload& TuneTask::workload() const { return impl_->workload(); }

TuneSummary tune(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, Measurer& measurer) {
  MeasurePool gpus({&measurer});
  return tune(c, hws, o, gpus);
}

TuneSummary tune(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o, MeasurePool& gpus) {
  const auto t0 = Clock::now();
  CostModel model;
  const std::string key = make_workload(c).key;
  RunKeys keys;
  keys.add(key, c);
  LogHistory history = read_history(model, keys, hws, o);
  std::unique_ptr<LogWriter> log;
  if (!o.log_path.empty()) log = std::make_unique<LogWriter>(o.log_path);
  TuneTask task(c, hws, o, model, history.own[key], log.get());
  for (const CandidateRef& seed : history.first_seeds[key]) task.offer(seed, true);
  for (const CandidateRef& seed : history.seeds) task.offer(seed);
  // The confirmation's time is kept out of the time budget's search.
  task.run(trial_cap(o), gpus, [&] {
    return o.time_budget_s > 0 && seconds_since(t0) + task.confirm_seconds() > o.time_budget_s;
  });
  task.confirm(gpus);
  TuneSummary s = task.summary();
  s.transferred = history.transferred;
  s.wall_s = seconds_since(t0);
  return s;
}

namespace {

using Ranked = std::vector<std::pair<double, Candidate>>;

/// Every arm's default and a pool of samples, ranked by the analytic estimate, the fastest
/// `o.trials` of them. Past the time budget no further arm is ranked (the first always is).
Ranked rank_analytically(Search& search, const TuneOptions& o, const std::function<bool()>& over_budget,
                         bool& budget_reached) {
  const SearchSpace& space = search.space();
  Ranked ranked;
  for (std::size_t e = 0; e < space.entries().size(); ++e) {
    if (e > 0 && over_budget()) {
      budget_reached = true;
      break;
    }
    for (const Candidate& cand : search.pool(static_cast<int>(e), 24)) {
      search.mark_seen(static_cast<int>(e), cand.params);
      ranked.emplace_back(analytic_time_us(space.entries()[e].gemm, cand.params, o.device), cand);
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  ranked.resize(std::min<std::size_t>(ranked.size(), static_cast<std::size_t>(std::max(1, o.trials))));
  return ranked;
}

/// The record of a ranked candidate compiled (or not), unmeasured.
TuneRecord unmeasured_record(Search& search, const std::pair<double, Candidate>& ranked, const CompileResult& bin) {
  TuneResult res;
  res.status = bin.ok ? "unmeasured" : "compile_error";
  res.estimated_us = ranked.first;
  res.compile_seconds = bin.seconds;
  if (!bin.ok) res.error = "generated kernel does not compile (a bug in tmap): " + bin.log.substr(0, 2000);
  return search.record(ranked.second.entry, ranked.second.params, res);
}

void report_ranked(const TuneOptions& o, const std::string& arm, int done, std::size_t total, Clock::time_point t0) {
  if (!o.on_progress) return;
  TuneProgress p;
  p.trials = done;
  p.total = static_cast<int>(total);
  p.arm = arm;
  p.elapsed_s = seconds_since(t0);
  p.eta_s = p.elapsed_s / done * static_cast<double>(total - static_cast<std::size_t>(done));
  o.on_progress(p);
}

}  // namespace

TuneSummary rank_with_model(const Compute& c, const std::vector<HwAbstraction>& hws, const TuneOptions& o) {
  const auto t0 = Clock::now();
  Search search(c, hws, o);
  const SearchSpace& space = search.space();
  TuneSummary s;
  s.arms = static_cast<int>(space.entries().size());
  // A time budget bounds the ranking and the compiling (the first batch is always compiled).
  const std::function<bool()> over_budget = [&] { return o.time_budget_s > 0 && seconds_since(t0) > o.time_budget_s; };
  bool budget_reached = false;
  const Ranked ranked = rank_analytically(search, o, over_budget, budget_reached);
  NvrtcCompiler compiler(o.compute_capability, o.compile_cache_dir);
  std::unique_ptr<LogWriter> log;
  if (!o.log_path.empty()) log = std::make_unique<LogWriter>(o.log_path);
  // Compiled and recorded batch by batch, so that a stop (SIGINT) loses nothing compiled.
  const std::size_t batch = static_cast<std::size_t>(std::max(1, o.batch));
  for (std::size_t begin = 0; begin < ranked.size(); begin += batch) {
    if (o.stop && o.stop->load()) {
      s.stopped = true;
      break;
    }
    if (begin > 0 && over_budget()) {
      budget_reached = true;
      break;
    }
    std::vector<Candidate> part;
    for (std::size_t i = begin; i < std::min(ranked.size(), begin + batch); ++i) part.push_back(ranked[i].second);
    CompiledBatch b = compile_batch(space, compiler, part, o.compile_threads, stopped_by(o.stop));
    for (std::size_t i = 0; i < part.size() && !b.binaries[i].cancelled; ++i) {  // a stop is not recorded
      TuneRecord rec = unmeasured_record(search, ranked[begin + i], b.binaries[i]);
      if (log) log->append(rec);
      if (!b.binaries[i].ok) ++s.failed;
      if (!s.best && b.binaries[i].ok) s.best = rec;
      report_ranked(o, space.entries()[part[i].entry].label, ++s.measured, ranked.size(), t0);
    }
  }
  s.stop_reason = s.stopped         ? "stopped by the user"
                  : budget_reached ? "time budget reached (ranked by the analytic model)"
                                   : "ranked by the analytic model";
  s.wall_s = seconds_since(t0);
  return s;
}

std::map<std::string, MeasuredSet> measured_sets(const std::vector<TuneRecord>& records,
                                                 const std::vector<HwAbstraction>& hws, const std::string& arch,
                                                 const DeviceLimits& limits, const DeviceModel& d) {
  std::map<std::string, std::vector<const TuneRecord*>> by_workload;
  for (const auto& r : records)
    if (r.result.ok() && r.target.arch == arch) by_workload[r.workload.key].push_back(&r);
  std::map<std::string, MeasuredSet> out;
  for (const auto& [key, group] : by_workload) {
    std::unique_ptr<Compute> c;
    try {
      c = std::make_unique<Compute>(rebuild_recorded_compute(group.front()->workload.compute, key, "log record"));
    } catch (const std::exception&) {
      continue;
    }
    SearchSpace space(*c, hws, Enumeration::kAll, limits, d.compute_capability);
    MeasuredSet& set = out[key];
    for (const TuneRecord* r : group) {
      const int e = space.find(r->candidate);
      if (e < 0 || !space.valid(e, r->candidate.params)) continue;
      // A range's record names the size its kernel ran at: the models see the GEMM at that size.
      const ImplicitGemm g = r->result.size > 0 ? gemm_at_size(space.entries()[e].gemm, r->result.size) : space.entries()[e].gemm;
      set.features.push_back(candidate_features(g, r->candidate.params, d));
      set.analytic_us.push_back(analytic_time_us(g, r->candidate.params, d));
      set.times_us.push_back(r->result.median_us);
    }
  }
  return out;
}

Regenerated regenerate(const TuneRecord& r, const std::vector<HwAbstraction>& hws, int cc) {
  Regenerated out;
  out.compute = std::make_unique<Compute>(
      rebuild_recorded_compute(r.workload.compute, r.workload.key, "the record of workload " + r.workload.key));
  // Matching the record's abstraction alone finds the same arm as the whole space would (arms are
  // per abstraction) at a fraction of the cost, which replays of long logs pay per record.
  std::vector<HwAbstraction> named;
  for (const HwAbstraction& h : hws)
    if (h.name == r.candidate.hw_abs) named.push_back(h);
  out.hws = std::make_unique<const std::vector<HwAbstraction>>(std::move(named));
  out.space = std::make_unique<SearchSpace>(*out.compute, *out.hws, Enumeration::kAll, DeviceLimits::for_arch(cc), cc);
  out.entry = out.space->find(r.candidate);
  const CandidateRef& c = r.candidate;
  if (out.entry < 0)
    throw UserError(format_diagnostic(
        SourceLoc::whole("the record of workload " + r.workload.key),
        "no mapping of '" + out.compute->name + "' matches the record's " + c.hw_abs + " " + c.layout + " mapping " +
            std::to_string(c.mapping_id) + " on sm_" + std::to_string(cc),
        "the abstraction may be missing (add --hw-dir) or newer than this GPU"));
  out.params = c.params;
  auto issues = validate(out.gemm(), out.params, DeviceLimits::for_arch(cc));
  if (!issues.empty())
    throw UserError(format_diagnostic(SourceLoc::whole("the record of workload " + r.workload.key),
                                      "the record's schedule is invalid on sm_" + std::to_string(cc) + ": " +
                                          std::string(message(issues[0].error)) + " (" + issues[0].detail + ")",
                                      "replay it on the architecture it was recorded on"));
  out.kernel = emit_kernel(out.gemm(), out.params);
  return out;
}

}  // namespace tmap
