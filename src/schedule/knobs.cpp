#include "tmap/schedule/knobs.h"

#include <algorithm>

#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

constexpr Knob kKnobs[] = {
#define TMAP_KNOB(name, default_value, lo, hi, every, error, feature, doc) \
  {#name, &ScheduleParams::name, default_value, lo, hi, every, ScheduleError::error, KnobFeature::feature, doc},
#include "tmap/schedule/knobs.def"
#undef TMAP_KNOB
};

}  // namespace

std::span<const Knob> knobs() { return kKnobs; }

const Knob* find_knob(std::string_view name) {
  for (const Knob& k : kKnobs)
    if (k.name == name) return &k;
  return nullptr;
}

int knob_index(std::string_view name) {
  const Knob* k = find_knob(name);
  TMAP_CHECK(k != nullptr, "no schedule knob is named \"" + std::string(name) + "\"");
  return static_cast<int>(k - kKnobs);
}

std::vector<std::string> knob_names() {
  std::vector<std::string> out;
  for (const Knob& k : kKnobs) out.emplace_back(k.name);
  return out;
}

KnobChoices::KnobChoices() {
  for (const Knob& k : kKnobs) by_knob_.push_back({Choice(k.default_value)});
}

KnobChoices& KnobChoices::set(std::string_view knob, std::vector<Choice> values) {
  TMAP_CHECK(!values.empty(), "no choices for knob " + std::string(knob));
  for (const Choice& c : values) TMAP_CHECK(c.weight >= 1, "a choice of knob " + std::string(knob) + " weighs < 1");
  by_knob_[knob_index(knob)] = std::move(values);
  return *this;
}

KnobChoices& KnobChoices::set_each(std::string_view knob, const std::vector<int>& values) {
  return set(knob, std::vector<Choice>(values.begin(), values.end()));
}

std::vector<int> KnobChoices::values_of(std::string_view knob) const {
  std::vector<int> out;
  for (const Choice& c : of(knob)) out.push_back(c.value);
  return out;
}

int KnobChoices::draw(int knob, std::mt19937_64& rng) const {
  const std::vector<Choice>& values = by_knob_[knob];
  std::uint64_t total = 0;
  for (const Choice& c : values) total += static_cast<std::uint64_t>(c.weight);
  std::uint64_t r = rng() % total;
  for (const Choice& c : values) {
    if (r < static_cast<std::uint64_t>(c.weight)) return c.value;
    r -= static_cast<std::uint64_t>(c.weight);
  }
  return values.back().value;
}

}  // namespace tmap
