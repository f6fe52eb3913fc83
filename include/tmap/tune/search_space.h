// The tuner's search space: every (abstraction, layout, intrinsic shape, mapping) the
// matcher finds for a compute (the arms of the search), times the schedule parameters of the
// code generator. Only valid schedules (see validate()) are ever produced.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tmap/gemm/implicit_gemm.h"
#include "tmap/match/match_report.h"
#include "tmap/schedule/schedule.h"
#include "tmap/tune/tune_log.h"

namespace tmap {

struct SpaceEntry {
  const HwAbstraction* hw = nullptr;
  const Match* match = nullptr;
  const Mapping* mapping = nullptr;
  /// The compute matched: the space's, or one of its group packs (pack_groups()).
  const Compute* compute = nullptr;
  ImplicitGemm gemm;
  std::string label;  ///< candidate_label() of the arm
  ScheduleParams defaults;  ///< default_schedule() of the arm on the space's device.
  /// The values the tuner draws for each knob.
  KnobChoices choices;
};

/// How a log names a candidate of compute `c`: abstraction `hw_abs`, match `m`'s layout and
/// shape, mapping `map` (its fused axes by iterator name) and the schedule `p`.
CandidateRef candidate_ref(const Compute& c, const std::string& hw_abs, const Match& m, const Mapping& map,
                           const ScheduleParams& p);

/// The most mappings (over all matches) that tuning considers; more is refused with a UserError.
inline constexpr std::size_t kMaxSearchMappings = 50000;

class SearchSpace {
 public:
  /// `c` and `hws` must outlive the space. Abstractions newer than `compute_capability` are left
  /// out; so are arms for which no valid schedule exists on `limits`.
  SearchSpace(const Compute& c, const std::vector<HwAbstraction>& hws, Enumeration e, const DeviceLimits& limits,
              int compute_capability);
  SearchSpace(const SearchSpace&) = delete;
  SearchSpace& operator=(const SearchSpace&) = delete;

  const std::vector<SpaceEntry>& entries() const { return entries_; }
  const Compute& compute() const { return compute_; }
  const DeviceLimits& limits() const { return limits_; }
  /// Why each abstraction has no arm, one "\n  - name: reason" line each (too new for the target,
  /// no emitter, rejected by the matcher with its reason, or matched without a valid schedule).
  std::string empty_reason() const { return empty_reason_; }

  bool valid(int entry, const ScheduleParams& p) const;
  /// A random valid schedule of an arm (its default when a few hundred draws find none).
  ScheduleParams sample(int entry, std::mt19937_64& rng) const;
  /// One or two parameters moved to another of their choices; valid, or the parent unchanged.
  ScheduleParams mutate(int entry, const ScheduleParams& p, std::mt19937_64& rng) const;
  /// Each parameter from one parent or the other; valid, or the first parent.
  ScheduleParams crossover(int entry, const ScheduleParams& a, const ScheduleParams& b, std::mt19937_64& rng) const;

  /// The record form of a candidate, and back (-1 when the log names no arm of this space; a
  /// padded mapping that differs from an arm's only by iterators of extent 1 finds that arm).
  CandidateRef ref(int entry, const ScheduleParams& p) const;  // candidate_ref() of the entry
  int find(const CandidateRef& r) const;
  /// Schedule `p` of arm `entry` on each of the mapping's relayout twins (the same mapping reading
  /// a prologue's copies, or not), with the vectors narrowed where the twin's rows are shorter;
  /// twins where no narrowing is valid are left out.
  std::vector<std::pair<int, ScheduleParams>> twins(int entry, const ScheduleParams& p) const;
  /// A key naming a candidate uniquely within the space.
  static std::string key(int entry, const ScheduleParams& p);

 private:
  /// Names an arm of compute `c` up to iterators of extent 1, which change no kernel.
  static std::string arm_key(const Compute& c, const std::string& hw_abs, const std::string& layout,
                             const std::array<std::int64_t, 3>& shape, const std::array<std::vector<int>, 3>& axes);
  /// Refuses a compute of more mappings than tuning considers (kMaxSearchMappings).
  void check_mapping_count(const Compute& c, const MatchReport& report) const;
  /// The arms of `report`'s mappings of `c` (the space's compute or a pack of it); `scheduled`
  /// and `unscheduled` gather, over all calls, which abstractions have an arm and why not.
  void add_arms(const Compute& c, const MatchReport& report, const std::vector<HwAbstraction>& hws,
                std::set<std::string>& scheduled, std::map<std::string, std::string>& unscheduled);
  /// `p` on arm `entry` with its relayout value and the widest vectors valid there, if any.
  std::optional<ScheduleParams> narrowed(int entry, ScheduleParams p) const;

  const Compute& compute_;
  DeviceLimits limits_;
  MatchReport report_;
  /// The group packs of the compute (pack_groups()) and their matches, which arms point into.
  struct PackedCompute {
    Compute compute;
    MatchReport report;
  };
  std::vector<std::unique_ptr<PackedCompute>> packs_;
  std::vector<SpaceEntry> entries_;
  std::string empty_reason_;
};

}  // namespace tmap
