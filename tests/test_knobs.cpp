// The knob registry (knobs.def): each knob declared once, and everything derived from it agrees
// with the declaration: JSON, validation, the families' knob uses and choices, the tuner's draws,
// the cost model's features and docs/knobs.md.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/match/match_report.h"
#include "tmap/tune/features.h"

namespace tmap {
namespace {

TEST(Knobs, DeclaredOnceWithDefaultsInRange) {
  std::set<std::string_view> names;
  const ScheduleParams defaults;
  for (const Knob& k : knobs()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name << " declared twice";
    EXPECT_LE(k.min, k.default_value) << k.name;
    EXPECT_LE(k.default_value, k.max) << k.name;
    EXPECT_EQ(k.get(defaults), k.default_value) << k.name;
    EXPECT_FALSE(k.doc.empty()) << k.name;
    EXPECT_EQ(find_knob(k.name), &k);
  }
  EXPECT_EQ(find_knob("no_such_knob"), nullptr);
  EXPECT_EQ(knob_names().size(), knobs().size());
}

TEST(Knobs, JsonRoundTripsEveryKnob) {
  ScheduleParams p;
  int v = 0;
  for (const Knob& k : knobs()) k.set(p, k.min + (v++ % (k.max - k.min + 1)));
  const nlohmann::json j = to_json(p);
  EXPECT_EQ(j.size(), knobs().size());
  EXPECT_EQ(schedule_from_json(j), p);
  const std::string unknown = testing::user_error_of([] { schedule_from_json(nlohmann::json{{"blockm", 64}}); });
  EXPECT_NE(unknown.find("unknown schedule parameter \"blockm\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("uniform_wait"), std::string::npos) << "the hint lists every knob: " << unknown;
}

// Every family declares only knobs that exist and that not every family takes, within the
// knobs' ranges; a knob a family does not take is refused at any value but its default, with the
// families that take it named.
TEST(Knobs, FamiliesDeclareTheKnobsTheyTake) {
  for (const std::string& name : family_names()) {
    for (const KnobUse& use : find_family(name)->knob_uses()) {
      const Knob* k = find_knob(use.knob);
      ASSERT_NE(k, nullptr) << name << " declares an unknown knob " << use.knob;
      EXPECT_FALSE(k->every_family) << name << ": " << use.knob << " is taken by every family already";
      EXPECT_LE(k->min, use.min) << name << " " << use.knob;
      EXPECT_LE(use.max, k->max) << name << " " << use.knob;
    }
  }
  EXPECT_EQ(knob_takers(*find_knob("a_regs")), "wgmma 0-1");
  EXPECT_EQ(knob_takers(*find_knob("cluster")), "mma_sync 0-1, wgmma 0-3, simt 0-1");
  EXPECT_EQ(knob_takers(*find_knob("block_m")), "every family");
}

// The search draws only values the family takes: for each shipped abstraction's first mapping of
// a GEMM, every knob the family does not declare is offered at its default alone, and every
// other knob's choices lie within its declared values; weights are at least 1.
TEST(Knobs, ChoicesStayWithinWhatTheFamilyTakes) {
  const Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=128", "K=256"}));
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  int checked = 0;
  for (const HwAbstraction& hw : testing::shipped()) {
    if (hw.min_compute_capability > 90) continue;
    const MatchReport r = match_compute(c, {hw}, Enumeration::kAmos);
    if (r.matches.empty() || r.matches[0].mappings.empty()) continue;
    const ImplicitGemm g = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings[0]);
    const EmitterFamily& family = family_of(hw);
    const KnobChoices choices = family.choices(g, default_schedule(g, limits), limits);
    for (const Knob& k : knobs()) {
      const KnobUse* use = find_knob_use(family, k.name);
      for (const Choice& ch : choices.of(k.name)) {
        EXPECT_GE(ch.weight, 1) << hw.name << " " << k.name;
        if (k.every_family) {
          EXPECT_TRUE(k.min <= ch.value && ch.value <= k.max) << hw.name << " " << k.name << " " << ch.value;
        } else if (!use) {
          EXPECT_EQ(ch.value, k.default_value) << hw.name << " offers " << k.name << ", which it does not take";
        } else {
          EXPECT_TRUE(use->min <= ch.value && ch.value <= use->max) << hw.name << " " << k.name << " " << ch.value;
        }
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

// A weighted draw is the draw from the list with each value repeated by its weight.
TEST(Knobs, WeightedDrawsMatchRepeatedLists) {
  KnobChoices c;
  c.set("split_k", {{1, 3}, 2, 3, {8, 2}});
  const std::vector<int> repeated = {1, 1, 1, 2, 3, 8, 8};
  std::mt19937_64 a(7), b(7);
  std::map<int, int> counts;
  for (int i = 0; i < 7000; ++i) {
    const int drawn = c.draw(knob_index("split_k"), a);
    EXPECT_EQ(drawn, repeated[b() % repeated.size()]);
    ++counts[drawn];
  }
  EXPECT_NEAR(counts[1], 3000, 200);
  EXPECT_NEAR(counts[8], 2000, 200);
  EXPECT_EQ(c.values_of("stages"), std::vector<int>{ScheduleParams{}.stages}) << "a knob not set keeps its default";
}

TEST(Knobs, FeaturesFollowTheRegistry) {
  const std::vector<std::string> names = feature_names();
  ASSERT_EQ(names.size(), kNumFeatures);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "feature names are unique";
  for (const Knob& k : knobs()) {
    const std::string name = k.feature == KnobFeature::kLog2 ? "log2_" + std::string(k.name) : std::string(k.name);
    const bool listed = std::find(names.begin(), names.end(), name) != names.end();
    EXPECT_EQ(listed, k.feature != KnobFeature::kNone) << k.name;
  }
  EXPECT_EQ(names[kAnalyticFeature], "log2_analytic_us");
}

// docs/knobs.md carries the generated reference (`tmap knobs`) below its introduction.
TEST(Knobs, DocsMatchTheRegistry) {
  std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/docs/knobs.md");
  ASSERT_TRUE(in) << "docs/knobs.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(knob_reference_markdown()), std::string::npos)
      << "docs/knobs.md is out of date: regenerate its table with 'tmap knobs'";
}

}  // namespace
}  // namespace tmap
