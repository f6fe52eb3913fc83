// Schedule knobs: the parameters of an implicit-GEMM kernel, each declared once in knobs.def,
// and the registry that reads, checks, searches and describes them by name.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tmap {

/// A kernel's schedule: one int per knob of knobs.def, named as there.
struct ScheduleParams {
#define TMAP_KNOB(name, default_value, ...) int name = default_value;
#include "tmap/schedule/knobs.def"
#undef TMAP_KNOB
  bool operator==(const ScheduleParams&) const = default;
};

/// Why a schedule is invalid (ScheduleIssue carries the details).
enum class ScheduleError {
  kTileNotMultipleOfIntrinsic,
  kBlockNotMultipleOfWarp,
  kTooManyThreads,
  kSharedMemoryExceeded,
  kBadStages,
  kBadOption,
  kBadVector,
  kBadAsyncCopy,
  kMisalignedRows,
  kMisalignedFragments,
  kBadSplitK,
  kGridTooLarge,
};

/// How the cost model sees a knob (a feature named after it; "log2_<name>" for kLog2).
enum class KnobFeature { kNone, kValue, kLog2 };

/// One schedule knob, as declared in knobs.def.
struct Knob {
  std::string_view name;  ///< The field and JSON key.
  int ScheduleParams::*field;
  int default_value, min, max;
  bool every_family;  ///< Taken by every family; otherwise only by those that declare it.
  ScheduleError range_error;  ///< The error of a value outside [min, max].
  KnobFeature feature;
  std::string_view doc;  ///< One line.

  int get(const ScheduleParams& p) const { return p.*field; }
  void set(ScheduleParams& p, int value) const { p.*field = value; }
};

/// Every knob, in declaration order.
std::span<const Knob> knobs();
/// The knob of that name, or nullptr.
const Knob* find_knob(std::string_view name);
/// The position of knob `name` in knobs(); an InternalError for a name that is not a knob.
int knob_index(std::string_view name);
/// Knob names, in order, for messages.
std::vector<std::string> knob_names();
/// The number of knobs the cost model sees (feature != kNone), known at compile time.
inline constexpr std::size_t kNumKnobFeatures = 0
#define TMAP_KNOB(name, d, lo, hi, every, err, feature, ...) +(KnobFeature::feature != KnobFeature::kNone ? 1 : 0)
#include "tmap/schedule/knobs.def"
#undef TMAP_KNOB
    ;

/// A knob a family takes beyond those every family takes, and the values it accepts there.
struct KnobUse {
  std::string_view knob;
  int min, max;
};

/// One value the tuner may draw for a knob, with its weight (drawn weight / total of the knob).
struct Choice {
  int value;
  int weight = 1;
  Choice(int v, int w = 1) : value(v), weight(w) {}  // NOLINT: a bare value weighs 1
};

/// The values the tuner draws for each knob, by knob name; a knob not set keeps its default.
class KnobChoices {
 public:
  KnobChoices();
  /// Sets the choices of `knob` (an InternalError for an unknown name, no values or a weight < 1).
  KnobChoices& set(std::string_view knob, std::vector<Choice> values);
  /// Sets computed choices: each value weighs 1 (a value listed twice, 2).
  KnobChoices& set_each(std::string_view knob, const std::vector<int>& values);
  const std::vector<Choice>& of(int knob) const { return by_knob_[knob]; }
  const std::vector<Choice>& of(std::string_view knob) const { return by_knob_[knob_index(knob)]; }
  /// The values of `knob`'s choices, in order (without their weights).
  std::vector<int> values_of(std::string_view knob) const;
  /// One value of `knob`, drawn by weight.
  int draw(int knob, std::mt19937_64& rng) const;

 private:
  std::vector<std::vector<Choice>> by_knob_;  ///< In knobs() order.
};

}  // namespace tmap
