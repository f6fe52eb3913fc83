// Matching: the three stages with their reasons, the mapping counts AMOS reports, the partner
// rule checked as a property of every mapping, feasibility and padding waste.
#include <gtest/gtest.h>

#include <set>

#include "test_util.h"
#include "tmap/frontend/op_library.h"
#include "tmap/match/match_report.h"

namespace tmap {
namespace {

using testing::build_json;

using testing::shipped;
const HwAbstraction& hw(const std::string& name) { return find_hw(shipped(), name); }

Compute op(const std::string& name, const std::vector<std::string>& sets = {}) {
  return build_compute(builtin_op(name), parse_param_overrides(sets));
}

MatchReport report(const Compute& c, const std::string& hw_name, Enumeration e) {
  return match_compute(c, {hw(hw_name)}, e);
}

std::vector<std::string> names(const Compute& c, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(c.iters[id].name);
  return out;
}

struct CountCase {
  std::string op;
  std::vector<std::string> sets;
  std::size_t amos, all;
};

// The counts of the AMOS paper and README for wmma_fp16_fp32 (3 shapes x 4 layouts).
TEST(Mapping, CountsMatchAmos) {
  const CountCase cases[] = {
      {"conv2d", {}, 35, 49},
      {"conv2d_nhwc", {}, 35, 49},
      {"gemm", {}, 1, 1},
      {"gemm_tt", {}, 1, 1},
      {"batched_gemm", {}, 1, 1},
      {"conv1d", {}, 6, 9},
      {"conv3d", {}, 180, 225},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    Compute compute = op(c.op, c.sets);
    for (auto [e, expected] : {std::pair{Enumeration::kAmos, c.amos}, std::pair{Enumeration::kAll, c.all}}) {
      MatchReport r = report(compute, "wmma_fp16_fp32", e);
      ASSERT_EQ(r.matches.size(), 12u);
      for (const auto& m : r.matches) EXPECT_EQ(m.mappings.size(), expected) << enumeration_name(e);
    }
  }
}

TEST(Mapping, Conv2dBatchOneFeasibilityPerShape) {
  // conv2d (1,128,28,28,128,3,3,1,1,1): under amos, 8x32x16 has 20 mappings that fit and 15
  // that AMOS calls infeasible (its README), padded here; every layout of one shape agrees.
  MatchReport r = report(op("conv2d"), "wmma_fp16_fp32", Enumeration::kAmos);
  std::map<std::string, std::set<std::pair<int, int>>> per_shape;
  for (const auto& m : r.matches) {
    int feasible = 0;
    for (const auto& map : m.mappings) feasible += map.fits();
    per_shape[m.shape.str()].insert({feasible, static_cast<int>(m.mappings.size()) - feasible});
  }
  EXPECT_EQ(per_shape["8x32x16"], (std::set<std::pair<int, int>>{{20, 15}}));
  EXPECT_EQ(per_shape["16x16x16"], (std::set<std::pair<int, int>>{{20, 15}}));
  EXPECT_EQ(per_shape["32x8x16"], (std::set<std::pair<int, int>>{{8, 27}}));
  // The matches are every layout and shape of the abstraction, in file order.
  std::vector<std::string> keys;
  for (const auto& m : r.matches) keys.push_back(m.layout + " " + m.shape.str());
  EXPECT_EQ(keys, (std::vector<std::string>{"nnn 16x16x16", "nnn 32x8x16", "nnn 8x32x16", "ntn 16x16x16", "ntn 32x8x16",
                                            "ntn 8x32x16", "tnn 16x16x16", "tnn 32x8x16", "tnn 8x32x16", "ttn 16x16x16",
                                            "ttn 32x8x16", "ttn 8x32x16"}));
}

/// The partner rule written independently of the implementation: two iterators clash when
/// some dimension of the tensor's access uses both.
bool clash(const Access& a, int x, int y) {
  for (const auto& idx : a.indices)
    if (idx.coef(x) != 0 && idx.coef(y) != 0) return true;
  return false;
}

TEST(Mapping, AmosMappingsAreExactlyThoseWithPartners) {
  for (const std::string name : {"conv1d", "conv2d", "conv2d_nhwc", "conv3d", "depthwise_conv2d", "gemv"}) {
    SCOPED_TRACE(name);
    Compute c = op(name);
    MatchReport all = report(c, "wmma_fp16_fp32", Enumeration::kAll);
    MatchReport amos = report(c, "wmma_fp16_fp32", Enumeration::kAmos);
    const Match& m = all.matches[0];
    const Access& a = c.inputs[m.roles.a_input];
    std::set<int> amos_ids;
    for (const auto& map : amos.matches[0].mappings) amos_ids.insert(map.id);
    std::set<int> ids;
    for (const auto& map : m.mappings) {
      ids.insert(map.id);
      const auto& si = map.axes[0];
      const auto& sk = map.axes[2];
      auto has_partner = [&](int x, const std::vector<int>& others) {
        for (int y : others)
          if (!clash(a, x, y)) return true;
        return false;
      };
      bool valid = true;
      if (!si.empty() && !sk.empty()) {
        for (int x : si) valid = valid && has_partner(x, sk);
        for (int y : sk) valid = valid && has_partner(y, si);
      }
      EXPECT_EQ(valid, amos_ids.count(map.id) == 1) << "mapping " << map.id << " i=" << axis_set_text(c, si)
                                                      << " k=" << axis_set_text(c, sk);
      // Each axis fuses only candidates of that axis, and every mapped set is non-empty when
      // the axis has candidates.
      for (int ax = 0; ax < 3; ++ax) {
        for (int it : map.axes[ax])
          EXPECT_NE(std::find(m.index.candidates[ax].begin(), m.index.candidates[ax].end(), it),
                    m.index.candidates[ax].end());
        EXPECT_EQ(map.axes[ax].empty(), m.index.candidates[ax].empty());
      }
    }
    EXPECT_EQ(ids.size(), m.mappings.size()) << "mapping ids are unique";
    EXPECT_EQ(*ids.rbegin() + 1, static_cast<int>(m.mappings.size())) << "all-ids are 0..n-1";
  }
}

struct IndexCase {
  std::string op;
  std::vector<std::string> i, j, k, batch, outer;
};

TEST(Matcher, ClassifiesIteratorsByTheTensorsTheyIndex) {
  const IndexCase cases[] = {
      {"gemm", {"m"}, {"n"}, {"k"}, {}, {}},
      {"gemm_tn", {"m"}, {"n"}, {"k"}, {}, {}},
      {"batched_gemm", {"m"}, {"n"}, {"k"}, {"b"}, {}},
      {"gemv", {"m"}, {}, {"k"}, {}, {}},
      {"conv2d", {"n", "p", "q"}, {"k"}, {"c", "r", "s"}, {"g"}, {}},
      {"conv2d_nhwc", {"n", "p", "q"}, {"k"}, {"r", "s", "c"}, {"g"}, {}},
      {"depthwise_conv2d", {"n", "p", "q"}, {}, {"r", "s"}, {"c"}, {}},
      {"conv3d", {"n", "z", "p", "q"}, {"k"}, {"c", "t", "r", "s"}, {}, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    Compute compute = op(c.op);
    ExprMatch roles = match_expression(compute, hw("wmma_fp16_fp32"));
    ASSERT_TRUE(roles.ok());
    IndexMatch index = match_indices(compute, roles);
    ASSERT_TRUE(index.ok());
    EXPECT_EQ(names(compute, index.candidates[0]), c.i);
    EXPECT_EQ(names(compute, index.candidates[1]), c.j);
    EXPECT_EQ(names(compute, index.candidates[2]), c.k);
    EXPECT_EQ(names(compute, index.batch), c.batch);
    EXPECT_EQ(names(compute, index.outer), c.outer);
  }
}

const char* kTemplate = R"({
  "compute": "%s",
  "params": {"M": 64, "N": 32, "K": 48},
  "tensors": {%s}
})";

std::string compute_json(const std::string& stmt, const std::string& tensors) {
  char buf[2048];
  std::snprintf(buf, sizeof buf, kTemplate, stmt.c_str(), tensors.c_str());
  return buf;
}

std::string tensor(const std::string& name, const std::string& shape, const std::string& dtype) {
  return "\"" + name + "\": {\"shape\": " + shape + ", \"dtype\": \"" + dtype + "\"}";
}

std::string gemm_json(const std::string& in, const std::string& out) {
  return compute_json("C[m, n] += A[m, k] * B[k, n]", tensor("A", R"(["M", "K"])", in) + ", " +
                                                          tensor("B", R"(["K", "N"])", in) + ", " +
                                                          tensor("C", R"(["M", "N"])", out));
}

struct ReasonCase {
  std::string name;
  std::string json;
  std::string hw;
  MatchFailure failure;
  std::string detail;  // expected substring of the reason
};

TEST(Matcher, EveryStageSaysWhyItFails) {
  const ReasonCase cases[] = {
      {"three inputs",
       compute_json("C[m, n] += A[m, k] * B[k, n] * S[m]",
                    tensor("A", R"(["M", "K"])", "float16") + ", " + tensor("B", R"(["K", "N"])", "float16") + ", " +
                        tensor("S", R"(["M"])", "float16") + ", " + tensor("C", R"(["M", "N"])", "float32")),
       "wmma_fp16_fp32", MatchFailure::kInputCountMismatch, "multiplies 3 input(s)"},
      {"one input", compute_json("C[m, n] += A[m, n]", tensor("A", R"(["M", "N"])", "float16") + ", " + tensor("C", R"(["M", "N"])", "float32")),
       "wmma_fp16_fp32", MatchFailure::kInputCountMismatch, "multiplies 1 input(s)"},
      {"elementwise assign",
       compute_json("C[m, n] = A[m, n] * B[m, n]", tensor("A", R"(["M", "N"])", "float16") + ", " +
                                                       tensor("B", R"(["M", "N"])", "float16") + ", " +
                                                       tensor("C", R"(["M", "N"])", "float32")),
       "wmma_fp16_fp32", MatchFailure::kNotAccumulation, "assigns with '='"},
      {"fp32 data on fp16 units", gemm_json("float32", "float32"), "wmma_fp16_fp32", MatchFailure::kInputDTypeMismatch,
       "inputs A (float32) and B (float32); operands A (float16) and B (float16)"},
      {"fp16 out on fp32 accumulator", gemm_json("float16", "float16"), "wmma_fp16_fp32",
       MatchFailure::kAccumulatorDTypeMismatch, "output C accumulates in float16, accumulator D is float32"},
      {"fp16 out names the fix", gemm_json("float16", "float16"), "wmma_fp16_fp32", MatchFailure::kAccumulatorDTypeMismatch,
       "to sum in float32 and store float16, give \"accumulate\": \"float32\" in the compute"},
      {"bf16 data on fp16 units", gemm_json("bfloat16", "float32"), "wmma_fp16_fp32", MatchFailure::kInputDTypeMismatch, "bfloat16"},
      {"int8 into fp32", gemm_json("float16", "float32"), "wmma_int8_int32", MatchFailure::kAccumulatorDTypeMismatch, "int32"},
      {"elementwise accumulate",
       compute_json("C[m, n] += A[m, n] * B[m, n]", tensor("A", R"(["M", "N"])", "float16") + ", " +
                                                        tensor("B", R"(["M", "N"])", "float16") + ", " +
                                                        tensor("C", R"(["M", "N"])", "float32")),
       "wmma_fp16_fp32", MatchFailure::kNoMappableIterator, "every iterator of 'test' indexes all three tensors or only one"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Compute compute = build_json(c.json);
    MatchReport r = report(compute, c.hw, Enumeration::kAmos);
    EXPECT_TRUE(r.matches.empty());
    ASSERT_EQ(r.rejected.size(), 1u);
    EXPECT_EQ(r.rejected[0].failure, c.failure);
    EXPECT_EQ(r.rejected[0].hw_abs, c.hw);
    EXPECT_NE(r.rejected[0].reason.find(std::string(message(c.failure))), std::string::npos) << r.rejected[0].reason;
    EXPECT_NE(r.rejected[0].reason.find(c.detail), std::string::npos) << r.rejected[0].reason;
  }
  // Every failure kind has a message and a stage.
  for (auto f : {MatchFailure::kNotAccumulation, MatchFailure::kInputCountMismatch, MatchFailure::kInputDTypeMismatch,
                 MatchFailure::kAccumulatorDTypeMismatch, MatchFailure::kNoMappableIterator}) {
    EXPECT_FALSE(message(f).empty());
    EXPECT_NE(stage(f), "unknown");
  }
}

struct DTypeCase {
  std::string in, out;
  std::vector<std::string> matching;
};

TEST(Matcher, DTypesSelectTheAbstraction) {
  const DTypeCase cases[] = {
      {"float16", "float32", {"mma_sync_fp16_fp32", "simt_fp16_fp32", "wgmma_fp16_fp32", "wmma_fp16_fp32"}},
      {"float16", "float16", {"simt_fp16_fp16", "wmma_fp16_fp16"}},
      {"bfloat16", "float32", {"mma_sync_bf16_fp32", "simt_bf16_fp32", "wgmma_bf16_fp32", "wmma_bf16_fp32"}},
      // float32 data rounds to tf32 operands on Tensor Cores, or stays float32 on CUDA cores
      {"float32", "float32", {"mma_sync_tf32_fp32", "simt_fp32_fp32", "wgmma_tf32_fp32", "wmma_tf32_fp32"}},
      {"int8", "int32", {"mma_sync_int8_int32", "simt_int8_int32", "wgmma_int8_int32", "wmma_int8_int32"}},
      {"int4", "int32", {"wmma_int4_int32"}},
      {"float64", "float64", {"wmma_fp64_fp64"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.in + " -> " + c.out);
    MatchReport r = match_compute(build_json(gemm_json(c.in, c.out)), shipped(), Enumeration::kAmos);
    std::set<std::string> got;
    for (const auto& m : r.matches) got.insert(m.hw_abs);
    EXPECT_EQ(got, std::set<std::string>(c.matching.begin(), c.matching.end()));
    EXPECT_EQ(r.rejected.size(), shipped().size() - c.matching.size());
  }
}

TEST(Matcher, OperandOrderFollowsTheStatementThenSwaps) {
  // Written order: the first input plays A.
  Compute wi = build_json(compute_json("C[m, n] += B[k, n] * A[m, k]", tensor("A", R"(["M", "K"])", "float16") + ", " +
                                                                           tensor("B", R"(["K", "N"])", "float16") + ", " +
                                                                           tensor("C", R"(["M", "N"])", "float32")));
  ExprMatch e = match_expression(wi, hw("wmma_fp16_fp32"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(wi.tensor_of(wi.inputs[e.a_input]).name, "B");
  IndexMatch idx = match_indices(wi, e);
  EXPECT_EQ(names(wi, idx.candidates[0]), std::vector<std::string>{"n"});  // i indexes A's role, here B
  // An abstraction with different operand dtypes takes the inputs in the order that fits.
  HwAbstraction mixed = hw("wmma_int8_int32");
  mixed.a_dtype = DType::kInt4;
  Compute c = build_json(compute_json("C[m, n] += A[m, k] * B[k, n]", tensor("A", R"(["M", "K"])", "int8") + ", " +
                                                                          tensor("B", R"(["K", "N"])", "int4") + ", " +
                                                                          tensor("C", R"(["M", "N"])", "int32")));
  ExprMatch swapped = match_expression(c, mixed);
  ASSERT_TRUE(swapped.ok());
  EXPECT_EQ(swapped.a_input, 1);
  EXPECT_EQ(swapped.b_input, 0);
}

TEST(Feasibility, PaddingWasteAndReasons) {
  // gemm 17 x 33 x 65 on 16x16x16: padded to 32 x 48 x 80.
  MatchReport r = report(op("gemm", {"M=17", "N=33", "K=65"}), "wmma_fp16_fp32", Enumeration::kAmos);
  const Mapping& m = r.matches[0].mappings[0];
  EXPECT_TRUE(m.fits());
  EXPECT_EQ(m.fused_extent, (std::array<std::int64_t, 3>{17, 33, 65}));
  EXPECT_NEAR(m.padding_waste, 1.0 - (17.0 * 33 * 65) / (32.0 * 48 * 80), 1e-12);
  // Smaller than the intrinsic along i: padded, naming the axis, its iterators, extent and the
  // intrinsic's m, with the waste of padding 8 rows to 16.
  MatchReport small = report(op("gemm", {"M=8"}), "wmma_fp16_fp32", Enumeration::kAmos);
  const Mapping& s = small.matches[0].mappings[0];  // 16x16x16
  EXPECT_FALSE(s.fits());
  EXPECT_EQ(s.padding, "axis i fuses {m} of extent 8, padded to the intrinsic's m = 16");
  EXPECT_NEAR(s.padding_waste, 0.5, 1e-12);
  EXPECT_TRUE(small.matches[2].mappings[0].fits());  // 8x32x16 fits
  // Two axes too small: both named.
  MatchReport tiny = report(op("gemm", {"M=3", "N=5", "K=7"}), "wmma_fp16_fp32", Enumeration::kAmos);
  EXPECT_EQ(tiny.matches[0].mappings[0].padding,
            "axis i fuses {m} of extent 3, padded to the intrinsic's m = 16; axis j fuses {n} of extent 5, padded to "
            "the intrinsic's n = 16; axis k fuses {k} of extent 7, padded to the intrinsic's k = 16");
}

TEST(Feasibility, UnmappedAxesArePaddedSilently) {
  // GEMV: j has no candidate and stays unmapped (extent 1, padded to n) without a padding note.
  MatchReport r = report(op("gemv"), "wmma_fp16_fp32", Enumeration::kAmos);
  ASSERT_EQ(r.matches.size(), 12u);
  const Mapping& m = r.matches[0].mappings[0];
  EXPECT_TRUE(m.axes[1].empty());
  EXPECT_TRUE(m.fits());
  EXPECT_NEAR(m.padding_waste, 15.0 / 16.0, 1e-12);
  // Depthwise: j unmapped; with a 3x3 window the reduction (9) is padded to k = 16 ...
  MatchReport d3 = report(op("depthwise_conv2d"), "wmma_fp16_fp32", Enumeration::kAmos);
  for (const auto& map : d3.matches[0].mappings) EXPECT_NE(map.padding.find("axis k fuses"), std::string::npos);
  // ... with a 5x5 window, mappings fusing r and s fit.
  MatchReport d5 = report(op("depthwise_conv2d", {"R=5", "S=5", "pad=2"}), "wmma_fp16_fp32", Enumeration::kAmos);
  int fit = 0;
  for (const auto& map : d5.matches[0].mappings) {
    fit += map.fits();
    if (map.fits()) EXPECT_EQ(map.axes[2].size(), 2u);
  }
  EXPECT_GT(fit, 0);
}

TEST(Feasibility, WasteIsTheIndependentFormulaForEveryMapping) {
  Compute c = op("conv2d", {"N=2", "C=20", "H=9", "W=11", "K=24", "stride=2"});
  MatchReport r = report(c, "wmma_fp16_fp32", Enumeration::kAll);
  for (const auto& match : r.matches)
    for (const auto& m : match.mappings) {
      double useful = 1, padded = 1;
      bool small = false;
      for (int ax = 0; ax < 3; ++ax) {
        std::int64_t e = 1;
        for (int it : m.axes[ax]) e *= c.iters[it].extent;
        std::int64_t s = match.shape.extent[ax];
        useful *= e;
        padded *= ((e + s - 1) / s) * s;
        small = small || (!m.axes[ax].empty() && e < s);
      }
      EXPECT_NEAR(m.padding_waste, 1 - useful / padded, 1e-12);
      EXPECT_EQ(m.fits(), !small);
    }
}

TEST(Roles, SwappedOrderPutsASkinnyAxisOnTheShortSide) {
  // m16n8k16 has no 8x16 shape: the transposed product is matched too, after the written one.
  Compute c = op("gemm", {"M=1", "N=4096", "K=4096"});
  MatchReport r = report(c, "mma_sync_fp16_fp32", Enumeration::kAmos);
  ASSERT_EQ(r.matches.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const Match& m = r.matches[i];
    EXPECT_EQ(m.roles.a_input, i < 4 ? 0 : 1);
    ASSERT_EQ(m.mappings.size(), 1u);
    const Mapping& map = m.mappings[0];
    EXPECT_EQ(names(c, map.axes[0]), std::vector<std::string>{i < 4 ? "m" : "n"});
    EXPECT_EQ(names(c, map.axes[1]), std::vector<std::string>{i < 4 ? "n" : "m"});
    // m = 1 padded to 16 rows (15/16 wasted), or to the 8 columns of the swapped order (7/8).
    EXPECT_NEAR(map.padding_waste, i < 4 ? 15.0 / 16 : 7.0 / 8, 1e-12);
  }
  // WMMA's shapes are symmetric (32x8 beside 8x32): no swapped matches.
  EXPECT_EQ(report(c, "wmma_fp16_fp32", Enumeration::kAmos).matches.size(), 12u);
  // Neither when the swapped order cannot feed the operands (int8 A with int4 B).
  HwAbstraction mixed = hw("mma_sync_int8_int32");
  mixed.a_dtype = DType::kInt4;
  Compute ci = build_json(compute_json("C[m, n] += A[m, k] * B[k, n]", tensor("A", R"(["M", "K"])", "int8") + ", " +
                                                                          tensor("B", R"(["K", "N"])", "int4") + ", " +
                                                                          tensor("C", R"(["M", "N"])", "int32")));
  MatchReport ri = match_compute(ci, {mixed}, Enumeration::kAmos);
  ASSERT_FALSE(ri.matches.empty());
  for (const auto& m : ri.matches) EXPECT_EQ(m.roles.a_input, 1);
}

}  // namespace
}  // namespace tmap
