// Every computation and every shape gets a correct kernel: axes smaller than the intrinsic are
// padded, the transposed product puts a skinny axis on the intrinsic's short side, and the SIMT
// family takes what no Tensor Core mapping fits. CPU tests compile (NVRTC); GPU tests verify
// against the reference kernel on fresh random inputs with poisoned outputs (relative L2 below
// 1e-2 for 16-bit inputs, 1e-5 for float32 inputs on CUDA cores, exact for integers), skipped
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "gpu_cases.h"
#include "test_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/features.h"
#include "tmap/tune/search_space.h"

namespace tmap {
namespace {

using testing::have_gpu;
using testing::shipped;
using testing::validation_text;

/// The odd extents of the sweep, tried on each parameter of each op that admits them.
constexpr int kOddExtents[] = {1, 2, 3, 5, 7, 17, 33, 127};

/// Every (op, one parameter set to one odd value) that builds; parameters that the op rejects
/// at that value (a window larger than the padded input, groups not dividing the channels) are
/// left out.
struct SweepCase {
  std::string label;
  Compute compute;
};
std::vector<SweepCase> sweep(std::initializer_list<int> values) {
  std::vector<SweepCase> out;
  for (const std::string& op : builtin_op_names()) {
    const ComputeDef def = builtin_op(op);
    for (const auto& param : def.params)
      for (int v : values) {
        const std::string set = param.name + "=" + std::to_string(v);
        try {
          out.push_back({op + " " + set, build_compute(def, parse_param_overrides({set}))});
        } catch (const UserError&) {
        }
      }
  }
  return out;
}

/// The first arm of the space whose abstraction is `hw_name`, or -1.
int arm_of(const SearchSpace& space, const std::string& hw_name) {
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e)
    if (space.entries()[e].hw->name == hw_name) return e;
  return -1;
}

/// The arm (and its default) the analytic model ranks best among those of Tensor Core families.
int best_tensor_core_arm(const SearchSpace& space, const DeviceModel& d) {
  int best = -1;
  double best_us = 0;
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e) {
    const SpaceEntry& entry = space.entries()[e];
    if (entry.hw->family == "simt") continue;
    const double us = analytic_time_us(entry.gemm, entry.defaults, d);
    if (best < 0 || us < best_us) best = e, best_us = us;
  }
  return best;
}

TEST(Coverage, EveryOpAndOddExtentHasAKernelThatCompiles) {
  const std::vector<SweepCase> cases = sweep({1, 2, 3, 5, 7, 17, 33, 127});
  std::map<std::string, int> per_op;
  for (const auto& c : cases) ++per_op[c.compute.name];
  // Every op takes part, each with most of its parameters.
  EXPECT_EQ(per_op.size(), builtin_op_names().size());
  ASSERT_GT(cases.size(), 400u);
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<CompileJob> jobs;
  std::vector<std::string> labels;
  // The sanitizer build's run (TMAP_TEST_SAMPLE) builds the spaces of a sample of the cases, every
  // op's included; the release build's run has built them all.
  const std::size_t sample = testing::sweep_sample();
  int tensor_core = 0, built = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const SweepCase& c = cases[i];
    if (i % sample != 0) continue;
    ++built;
    SCOPED_TRACE(c.label);
    SearchSpace space(c.compute, shipped(), Enumeration::kAmos, limits, 90);
    ASSERT_FALSE(space.entries().empty()) << space.empty_reason();
    // Every space's first arm is valid, and so is the SIMT family's default.
    const int simt = arm_of(space, "simt_fp16_fp32");
    ASSERT_GE(simt, 0);
    tensor_core += best_tensor_core_arm(space, DeviceModel::for_arch(90)) >= 0;
    // The SIMT default compiles for every case, the space's first arm (a Tensor Core mapping,
    // padded where an extent is small) for the smallest extents.
    std::vector<int> arms = {simt};
    const bool small = c.label.back() == '1' && c.label[c.label.size() - 2] == '=';
    if (small && simt != 0) arms.push_back(0);
    for (int e : arms) {
      const SpaceEntry& entry = space.entries()[e];
      ASSERT_TRUE(validate(entry.gemm, entry.defaults, limits).empty());
      // The cost model's features are finite (XGBoost refuses infinities), SIMT blocks of a few
      // threads included.
      for (float f : candidate_features(entry.gemm, entry.defaults, DeviceModel::for_arch(90)))
        ASSERT_TRUE(std::isfinite(f)) << entry.label;
      KernelSource k = emit_kernel(entry.gemm, entry.defaults);
      jobs.push_back({k.name, k.code});
      labels.push_back(c.label + ": " + entry.label);
    }
  }
  // With padding, Tensor Cores take every shape too.
  EXPECT_EQ(tensor_core, built);
  NvrtcCompiler compiler(90);
  const auto results = testing::compile_sweep(compiler, jobs);
  int failed = 0;
  for (const auto& [i, r] : results)
    if (!r.ok && failed++ < 3) ADD_FAILURE() << labels[i] << ":\n" << r.log;
  EXPECT_EQ(failed, 0);
  std::printf("%zu cases of %zu ops, %d spaces built, %zu kernels, %zu compiled for sm_90\n", cases.size(), per_op.size(),
              built, jobs.size(), results.size());
}

/// Virtual GEMMs of one abstraction on `c`: per match, its first mapping, or (with `padded`) its
/// first mapping that pads an axis and has a valid default schedule (a mapping of tiny M, N
/// and K can leave a grid too large for the rest).
std::vector<ImplicitGemm> gemms_of(const Compute& c, const std::string& hw_name, bool padded) {
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  std::vector<ImplicitGemm> out;
  static std::vector<MatchReport> keep;
  keep.push_back(match_compute(c, {hw}, Enumeration::kAll));
  for (const Match& m : keep.back().matches)
    for (const Mapping& map : m.mappings) {
      if (padded && map.fits()) continue;
      ImplicitGemm g = make_implicit_gemm(c, hw, m, map);
      const DeviceLimits limits = DeviceLimits::for_arch(90);
      if (padded && !validate(g, default_schedule(g, limits), limits).empty()) continue;
      out.push_back(g);
      break;
    }
  return out;
}

Compute op(const std::string& name, const std::vector<std::string>& sets) {
  return build_compute(builtin_op(name), parse_param_overrides(sets));
}

TEST(Coverage, PaddedAndSwappedTensorCoreKernelsCompile) {
  const Compute computes[] = {op("gemm", {"M=1", "N=4096", "K=4096"}), op("gemm", {"M=3", "N=5", "K=7"}),
                              op("depthwise_conv2d", {}),
                              op("conv2d_nhwc", {"C=1000", "H=1", "W=1", "K=1000", "R=1", "S=1", "pad=0"})};
  std::vector<CompileJob> jobs;
  int swapped = 0;
  for (const Compute& c : computes)
    for (const std::string hw : {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "wgmma_fp16_fp32"})
      for (const ImplicitGemm& g : gemms_of(c, hw, true)) {
        SCOPED_TRACE(c.name + " " + hw + " " + g.layout);
        const ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(90));
        ASSERT_TRUE(validate(g, p, DeviceLimits::for_arch(90)).empty());
        swapped += g.a_input == 1;
        KernelSource k = emit_kernel(g, p);
        jobs.push_back({k.name, k.code});
      }
  EXPECT_GT(swapped, 0);
  NvrtcCompiler compiler(90);
  const auto results = testing::compile_sweep(compiler, jobs);
  for (const auto& [i, r] : results) EXPECT_TRUE(r.ok) << r.log;
  std::printf("%zu padded Tensor Core kernels, %zu compiled (%d with A and B swapped)\n", jobs.size(), results.size(),
              swapped);
}

/// A SIMT schedule variant: the default with a few parameters changed.
struct Variant {
  std::string name;
  std::function<void(ScheduleParams&)> change;
};
const std::vector<Variant>& simt_variants() {
  static const std::vector<Variant> v = {
      {"default", [](ScheduleParams&) {}},
      {"lanes 8", [](ScheduleParams& p) { p.k_lanes = 8; p.warp_m = p.warp_n = 1; p.block_m = 4; p.block_n = 8; p.block_k = 64; }},
      {"lanes 32 split 3", [](ScheduleParams& p) { p.k_lanes = 32; p.warp_m = 1; p.warp_n = 2; p.block_m = 2; p.block_n = 4; p.block_k = 128; p.split_k = 3; }},
      {"tile 4x8 1 stage", [](ScheduleParams& p) { p.warp_m = 4; p.warp_n = 8; p.block_m = 32; p.block_n = 64; p.block_k = 16; p.stages = 1; p.async_copy = 0; }},
      {"scalar 2 stages rolled", [](ScheduleParams& p) { p.vec_a = p.vec_b = 1; p.async_copy = 0; p.stages = 2; p.unroll = 0; p.raster = 2; }},
      // Blocks narrower than the output's vectors (which then narrow too, staying aligned).
      {"narrow block", [](ScheduleParams& p) { p.block_m = 2; p.warp_m = 1; p.block_n = 16; p.warp_n = 1; p.k_lanes = 2; p.block_k = 32; }},
  };
  return v;
}

/// The compute of an abstraction's dtypes: gemm 67 x 33 x 65 with those inputs and accumulator.
Compute gemm_for(const HwAbstraction& hw, const std::vector<std::string>& sets) {
  ComputeDef def = builtin_op("gemm");
  auto in = [&](DType t) { return t == DType::kTFloat32 ? DType::kFloat32 : t; };
  for (auto& t : def.tensors) t.dtype = t.name == "C" ? hw.d_dtype : t.name == "A" ? in(hw.a_dtype) : in(hw.b_dtype);
  def.accumulate = hw.d_dtype;
  return build_compute(def, parse_param_overrides(sets));
}

TEST(Coverage, SimtCompilesEveryAbstractionLayoutAndSchedule) {
  std::vector<CompileJob> jobs;
  int skipped = 0;
  std::vector<std::pair<std::string, Compute>> computes;
  for (const HwAbstraction& hw : shipped())
    if (hw.family == "simt") computes.emplace_back(hw.name, gemm_for(hw, {"M=67", "N=33", "K=65"}));
  computes.emplace_back("simt_fp16_fp32", op("gemv", {"M=100", "K=300"}));
  computes.emplace_back("simt_fp16_fp32", op("depthwise_conv2d", {"C=24", "H=15", "W=15", "stride=2"}));
  for (const auto& [hw, c] : computes)
    for (const ImplicitGemm& g : gemms_of(c, hw, false))
      for (const auto& v : simt_variants()) {
        ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(90));
        v.change(p);
        if (!validate(g, p, DeviceLimits::for_arch(90)).empty()) {
          ++skipped;
          continue;
        }
        KernelSource k = emit_kernel(g, p);
        jobs.push_back({k.name, k.code});
      }
  EXPECT_GT(jobs.size(), 90u);
  const int archs[] = {80, 90};
  for (std::size_t a = 0; a < 2; ++a) {
    NvrtcCompiler compiler(archs[a]);
    int failed = 0;
    for (const auto& [i, r] : testing::compile_sweep(compiler, jobs, a, 2))
      if (!r.ok && failed++ < 3) ADD_FAILURE() << "sm_" << archs[a] << ":\n" << r.log;
    EXPECT_EQ(failed, 0);
  }
  std::printf("%zu SIMT kernels compiled for sm_80 and sm_90 (%s); %d variants did not apply\n", jobs.size(),
              testing::full_suite() ? "each for both" : "a share for one each", skipped);
}

TEST(Coverage, SimtValidationReasons) {
  Compute c = op("gemm", {"M=64", "N=64", "K=256"});
  const ImplicitGemm g = gemms_of(c, "simt_fp16_fp32", false).front();  // nnn
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const ScheduleParams d = default_schedule(g, limits);
  ASSERT_TRUE(validate(g, d, limits).empty());
  auto reasons = [&](const std::function<void(ScheduleParams&)>& change) {
    ScheduleParams p = d;
    change(p);
    return validation_text(g, p, limits);
  };
  auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.producer = 1; }), "only wgmma kernels"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.swizzle = 1; }), "only mma_sync and wgmma kernels take swizzle"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.stages = 3; p.async_copy = 0; }), "stages = 3 with async_copy = 0"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.k_lanes = 3; }), "k_lanes = 3: a power of two"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.k_lanes = 16; p.block_k = 8; }), "a multiple of 16"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.warp_m = 8; p.warp_n = 16; p.block_m = 64; p.block_n = 64; }), "128 accumulators"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.vec_a = 8; p.smem_pad = 3; }), "vectors of 16 bytes"));
  EXPECT_TRUE(has(reasons([](ScheduleParams& p) { p.k_lanes = 64; }), "k_lanes = 64"));
  // Packed dp4a reads along k need 4-byte rows.
  const HwAbstraction& dp4a = find_hw(shipped(), "simt_int8_int32");
  Compute ci = gemm_for(dp4a, {"M=64", "N=64", "K=256"});
  const ImplicitGemm gi = gemms_of(ci, "simt_int8_int32", false).front();
  ScheduleParams pi = default_schedule(gi, limits);
  pi.smem_pad = 2;
  pi.vec_a = pi.vec_b = 1;
  pi.async_copy = 0;
  pi.stages = 2;
  const std::string text = validation_text(gi, pi, limits);
  EXPECT_TRUE(has(text, "packed 4-byte reads along k")) << text;
  // k_lanes belongs to SIMT: a Tensor Core family refuses it.
  const ImplicitGemm tc = gemms_of(c, "mma_sync_fp16_fp32", false).front();
  ScheduleParams pt = default_schedule(tc, limits);
  pt.k_lanes = 4;
  const std::string tc_text = validation_text(tc, pt, limits);
  EXPECT_TRUE(has(tc_text, "only simt kernels take k_lanes")) << tc_text;
}

// ---- Window staging (SIMT, ScheduleParams::window) ----

/// A compute with its inputs in `in` and its output and sums in `acc` (a SIMT abstraction's dtypes).
Compute retyped(const std::string& name, DType in, DType acc, const std::vector<std::string>& sets) {
  ComputeDef def = builtin_op(name);
  for (auto& t : def.tensors) t.dtype = t.name == def.tensors.back().name ? acc : in;
  def.accumulate = acc;
  return build_compute(def, parse_param_overrides(sets));
}

/// Sliding windows with one filter per channel, in every form the window stager takes: strides,
/// dilations, paddings, odd and tiny extents, larger filters, 1-D (conv1d of one channel), the
/// grouped NCHW convolution with groups = C, and channels last (NHWC with groups = C: copies
/// along the channels of 16, 4 and 2 bytes).
std::vector<std::pair<std::string, Compute>> window_computes(DType in = DType::kFloat16, DType acc = DType::kFloat32) {
  std::vector<std::pair<std::string, Compute>> out;
  auto add = [&](const std::string& name, const std::vector<std::string>& sets) {
    std::string label = name;
    for (const auto& s : sets) label += " " + s;
    out.emplace_back(label, retyped(name, in, acc, sets));
  };
  add("depthwise_conv2d", {"C=24", "H=15", "W=15", "stride=2"});
  add("depthwise_conv2d", {"N=2", "C=5", "H=9", "W=9"});
  add("depthwise_conv2d", {"C=8", "H=16", "W=16", "dil=2", "pad=2"});
  add("depthwise_conv2d", {"C=3", "H=7", "W=12", "R=5", "S=5", "pad=0"});
  add("depthwise_conv2d", {"C=7", "H=1", "W=17", "R=1", "S=3"});
  add("depthwise_conv2d", {"C=4", "H=33", "W=1", "R=3", "S=1", "pad=0"});
  add("depthwise_conv2d", {"C=6", "H=8", "W=8", "R=1", "S=1", "pad=0", "stride=2"});
  add("depthwise_conv2d", {"C=16", "H=56", "W=56", "stride=1"});
  add("conv1d", {"N=3", "C=1", "K=1", "W=127", "S=5", "pad=2"});
  add("conv2d", {"C=12", "K=12", "groups=12", "H=10", "W=10"});
  add("conv2d_nhwc", {"C=24", "K=24", "groups=24", "H=15", "W=15", "stride=2"});
  add("conv2d_nhwc", {"N=2", "C=40", "K=40", "groups=40", "H=9", "W=9"});
  add("conv2d_nhwc", {"C=16", "K=16", "groups=16", "H=12", "W=12", "R=5", "S=5", "pad=2"});
  add("conv2d_nhwc", {"C=6", "K=6", "groups=6", "H=16", "W=16", "dil=2", "pad=2"});
  add("conv2d_nhwc", {"C=3", "K=3", "groups=3", "H=7", "W=10", "pad=0"});
  return out;
}

/// The space's arms whose default stages windows.
std::vector<int> window_arms(const SearchSpace& space) {
  std::vector<int> out;
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e)
    if (space.entries()[e].defaults.window) out.push_back(e);
  return out;
}

/// Window schedules beside an arm's default: other runs per thread, blocks of part of a row and
/// of several rows, batch entries per block, narrower copies with and without cp.async.
std::vector<std::pair<std::string, ScheduleParams>> window_variants(const SearchSpace& space, int arm) {
  const SpaceEntry& entry = space.entries()[arm];
  std::vector<std::pair<std::string, ScheduleParams>> out = {{"default", entry.defaults}};
  for (int tm : {1, 2, 8})
    for (int b : {0, 1, -1}) {  // the smallest block tile, the default's, the largest
      ScheduleParams p = entry.defaults;
      p.warp_m = tm;
      const std::vector<int> tiles = family_of(*entry.hw).block_tiles(entry.gemm, p, 'm');
      p.block_m = b == 0 ? tiles.front() : b < 0 ? tiles.back() : p.block_m;
      out.emplace_back("warp_m " + std::to_string(tm) + " block_m " + std::to_string(p.block_m), p);
    }
  for (int cv : {1, 4, 8}) {  // channels a thread, channels last (refused by the others)
    ScheduleParams p = entry.defaults;
    p.warp_n = cv;
    out.emplace_back("warp_n " + std::to_string(cv), p);
  }
  for (int bz : {1, 4, 64}) {
    ScheduleParams p = entry.defaults;
    p.block_n = bz;
    out.emplace_back("block_n " + std::to_string(bz), p);
  }
  for (int v : {1, 2, 4}) {
    ScheduleParams p = entry.defaults;
    p.vec_a = v;
    p.async_copy = v >= 2;
    out.emplace_back("vec_a " + std::to_string(v) + (v >= 2 ? " cp.async" : ""), p);
    p.async_copy = 0;
    out.emplace_back("vec_a " + std::to_string(v), p);
  }
  return out;
}

TEST(Coverage, SimtWindowKernelsCompile) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<CompileJob> jobs;
  std::vector<std::string> labels;
  for (const auto& [label, c] : window_computes()) {
    SCOPED_TRACE(label);
    SearchSpace space(c, shipped(), Enumeration::kAmos, limits, 90);
    const std::vector<int> arms = window_arms(space);
    ASSERT_FALSE(arms.empty()) << "no arm stages windows";
    for (int arm : arms) {
      const SpaceEntry& entry = space.entries()[arm];
      EXPECT_EQ(entry.gemm.layout, "tnn");
      EXPECT_EQ(entry.gemm.N, 1);
      for (const auto& [name, p] : window_variants(space, arm)) {
        if (!validate(entry.gemm, p, limits).empty()) continue;
        for (float f : candidate_features(entry.gemm, p, DeviceModel::for_arch(90))) ASSERT_TRUE(std::isfinite(f));
        KernelSource k = emit_kernel(entry.gemm, p);
        EXPECT_EQ(k.grid[2], (entry.gemm.batch + p.block_n - 1) / p.block_n);
        jobs.push_back({k.name, k.code});
        labels.push_back(label + " " + entry.label + " " + name);
      }
    }
  }
  EXPECT_GT(jobs.size(), 100u);
  // All for sm_90; every fifth for sm_80 too (cp.async and the vector copies are the same there).
  std::vector<CompileJob> some;
  for (std::size_t i = 0; i < jobs.size(); i += 5) some.push_back(jobs[i]);
  std::size_t compiled = 0;
  for (int cc : {80, 90}) {
    NvrtcCompiler compiler(cc);
    int failed = 0;
    const auto results = testing::compile_sweep(compiler, cc == 90 ? jobs : some);
    compiled += results.size();
    for (const auto& [i, r] : results)
      if (!r.ok && failed++ < 3) ADD_FAILURE() << "sm_" << cc << " " << labels[cc == 90 ? i : 5 * i] << ":\n" << r.log;
    EXPECT_EQ(failed, 0);
  }
  std::printf("%zu window kernels for sm_90, %zu of them for sm_80 too; %zu compilations\n", jobs.size(), some.size(),
              compiled);
}

TEST(Coverage, SimtWindowSamplesAreValidAndVaried) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const Compute c = op("depthwise_conv2d", {"C=144", "H=56", "W=56"});
  SearchSpace space(c, shipped(), Enumeration::kAmos, limits, 90);
  const std::vector<int> arms = window_arms(space);
  ASSERT_FALSE(arms.empty());  // the mappings of (p, q) to m and (r, s) to k, on layout tnn
  std::mt19937_64 rng(5);
  std::set<std::string> distinct;
  ScheduleParams p = space.entries()[arms[0]].defaults;
  for (int i = 0; i < 200; ++i) {
    const ScheduleParams s = i % 2 ? space.sample(arms[0], rng) : (p = space.mutate(arms[0], p, rng));
    ASSERT_TRUE(validate(space.entries()[arms[0]].gemm, s, limits).empty());
    EXPECT_EQ(s.window, 1);
    distinct.insert(to_json(s).dump());
  }
  EXPECT_GT(distinct.size(), 40u);
  // Other arms of the same compute keep im2col staging (window 0), so the tuner weighs both.
  int im2col = 0;
  for (const auto& e : space.entries()) im2col += e.hw->family == "simt" && !e.defaults.window;
  EXPECT_GT(im2col, 0);
}

TEST(Coverage, SimtWindowValidationReasons) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const Compute c = op("depthwise_conv2d", {"C=8", "H=14", "W=14"});
  SearchSpace space(c, shipped(), Enumeration::kAmos, limits, 90);
  const std::vector<int> arms = window_arms(space);
  ASSERT_FALSE(arms.empty());
  const SpaceEntry& entry = space.entries()[arms[0]];
  auto reasons = [&](const ImplicitGemm& g, ScheduleParams p, const std::function<void(ScheduleParams&)>& change) {
    change(p);
    return validation_text(g, p, limits);
  };
  auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  const ScheduleParams d = entry.defaults;
  EXPECT_TRUE(reasons(entry.gemm, d, [](ScheduleParams&) {}).empty());
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.stages = 2; }), "stages = 2: use 1"));
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.warp_m = 4; p.block_m = 28; }),
                  "warp_m = 4 does not divide the row of 14"));
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.block_m = 20; p.warp_m = 2; }),
                  "block_m = 20 neither divides nor is a multiple"));
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.vec_a = 4; }), "allow vectors of up to 2"));
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.vec_a = 1; p.async_copy = 1; }),
                  "async_copy = 1 with copies of 2 bytes"));
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.window = 2; }), "window = 2"));
  // Channels last: copies run along the channels, V batch entries at a time.
  const Compute nhwc = op("conv2d_nhwc", {"C=12", "K=12", "groups=12", "H=14", "W=14"});
  SearchSpace cl_space(nhwc, shipped(), Enumeration::kAmos, limits, 90);
  const std::vector<int> cl_arms = window_arms(cl_space);
  ASSERT_FALSE(cl_arms.empty());
  const SpaceEntry& cl = cl_space.entries()[cl_arms[0]];
  EXPECT_NE(emit_kernel(cl.gemm, cl.defaults).code.find("X = reinterpret_cast<half*>(smem);  // [IN_ROWS][LD][BZ]"),
            std::string::npos);  // channels staged side by side
  EXPECT_EQ(cl.defaults.vec_a, 4);  // 12 channels: 8-byte copies
  EXPECT_TRUE(reasons(cl.gemm, cl.defaults, [](ScheduleParams&) {}).empty());
  EXPECT_TRUE(has(reasons(cl.gemm, cl.defaults, [](ScheduleParams& p) { p.vec_a = 8; }),
                  "the image's 12 channels allow vectors of up to 4"));
  EXPECT_TRUE(has(reasons(cl.gemm, cl.defaults, [](ScheduleParams& p) { p.block_n = 2; }),
                  "block_n = 2 is not a multiple of vec_a = 4"));
  EXPECT_TRUE(has(reasons(cl.gemm, cl.defaults, [](ScheduleParams& p) { p.warp_n = 8; }),
                  "warp_n = 8: a thread's channels are a power of two of at most 16 bytes dividing the 12 channels"));
  EXPECT_TRUE(has(reasons(entry.gemm, d, [](ScheduleParams& p) { p.warp_n = 2; }), "warp_n = 2: use 1"));
  // Channels last without one filter per channel has no window.
  const Compute dense = op("conv2d_nhwc", {"C=12", "K=12", "H=14", "W=14"});
  const SearchSpace dense_space(dense, shipped(), Enumeration::kAmos, limits, 90);
  for (const auto& e : dense_space.entries()) EXPECT_EQ(e.defaults.window, 0);
  // A mapping without a window (a GEMM), and a Tensor Core family, refuse window = 1.
  const Compute gemm = op("gemm", {"M=64", "N=64", "K=64"});
  const ImplicitGemm simt = gemms_of(gemm, "simt_fp16_fp32", false).front();
  ScheduleParams ps = default_schedule(simt, limits);
  EXPECT_EQ(ps.window, 0);
  EXPECT_TRUE(has(reasons(simt, ps, [](ScheduleParams& p) { p.window = 1; }), "no window to stage"));
  const ImplicitGemm tc = gemms_of(gemm, "mma_sync_fp16_fp32", false).front();
  EXPECT_TRUE(has(reasons(tc, default_schedule(tc, limits), [](ScheduleParams& p) { p.window = 1; }),
                  "only simt kernels take window"));
  // Old logs' schedules (no "window" key) read as window = 0.
  EXPECT_EQ(schedule_from_json(nlohmann::json::parse(R"({"block_m": 64})")).window, 0);
  EXPECT_EQ(to_json(d)["window"], 1);
}

// ---- On the GPU ----

using testing::device_cc;
using testing::GpuCase;
using testing::run_cases;

TEST(GpuCoverage, SimtFamily) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 900;
  auto tolerance = [](const HwAbstraction& hw) {
    return hw.d_dtype == DType::kInt32 ? 0.0 : hw.a_dtype == DType::kFloat32 ? 1e-5 : 1e-2;
  };
  std::vector<std::pair<std::string, Compute>> computes;
  for (const HwAbstraction& hw : shipped())
    if (hw.family == "simt") computes.emplace_back(hw.name, gemm_for(hw, {"M=67", "N=33", "K=65"}));
  computes.emplace_back("simt_fp16_fp32", op("gemv", {"M=100", "K=300"}));
  computes.emplace_back("simt_fp16_fp32", op("depthwise_conv2d", {"C=24", "H=15", "W=15", "stride=2"}));
  computes.emplace_back("simt_fp16_fp32", op("gemm", {"M=1", "N=300", "K=520"}));
  computes.emplace_back("simt_fp16_fp32", op("conv2d", {"C=6", "H=9", "W=9", "K=5"}));
  for (const auto& [hw_name, c] : computes) {
    const HwAbstraction& hw = find_hw(shipped(), hw_name);
    std::vector<GpuCase> cases;
    for (const ImplicitGemm& g : gemms_of(c, hw_name, false))
      for (const auto& v : simt_variants()) {
        ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(device_cc()));
        v.change(p);
        if (!validate(g, p, DeviceLimits::for_arch(device_cc())).empty()) continue;
        cases.push_back({c.name + " " + hw_name + " " + g.layout + " " + v.name, g, p, tolerance(hw)});
      }
    EXPECT_GT(cases.size(), 4u) << c.name << " " << hw_name;
    run_cases(c, cases, seed++);
  }
}

TEST(GpuCoverage, PaddedAndSwappedTensorCoreKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 950;
  const Compute computes[] = {op("gemm", {"M=1", "N=300", "K=200"}), op("gemm", {"M=3", "N=5", "K=7"}),
                              op("depthwise_conv2d", {"C=16", "H=14", "W=14"}),
                              op("conv2d_nhwc", {"C=200", "H=1", "W=1", "K=100", "R=1", "S=1", "pad=0"})};
  for (const Compute& c : computes) {
    std::vector<GpuCase> cases;
    for (const std::string hw : {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "wgmma_fp16_fp32"})
      for (const ImplicitGemm& g : gemms_of(c, hw, true)) {
        const ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(device_cc()));
        cases.push_back({c.name + " " + hw + " " + g.layout + (g.a_input == 1 ? " swapped" : ""), g, p, 1e-2});
      }
    run_cases(c, cases, seed++);
  }
}

TEST(GpuCoverage, OddExtentSweep) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  // Each op with one parameter at 1 or 17: the SIMT default and the Tensor Core arm the
  // analytic model ranks first, against the reference.
  std::uint64_t seed = 1000;
  const DeviceLimits limits = DeviceLimits::for_arch(device_cc());
  int cases_run = 0;
  for (const auto& sc : sweep({1, 17})) {
    SearchSpace space(sc.compute, shipped(), Enumeration::kAmos, limits, device_cc());
    ASSERT_FALSE(space.entries().empty()) << sc.label;
    std::vector<GpuCase> cases;
    for (int e : {arm_of(space, "simt_fp16_fp32"), best_tensor_core_arm(space, DeviceModel::for_arch(device_cc()))}) {
      ASSERT_GE(e, 0) << sc.label;
      const SpaceEntry& entry = space.entries()[e];
      cases.push_back({sc.label + ": " + entry.label, entry.gemm, entry.defaults, 1e-2});
    }
    run_cases(sc.compute, cases, seed++);
    cases_run += static_cast<int>(cases.size());
  }
  EXPECT_GT(cases_run, 100);
}

TEST(GpuCoverage, SimtWindow) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  // Every window variant of every form against the reference: float16 and bfloat16 inputs at
  // 1e-2, float32 at 1e-5.
  std::uint64_t seed = 1200;
  const DeviceLimits limits = DeviceLimits::for_arch(device_cc());
  int cases_run = 0;
  for (const auto& [in, tol] : {std::pair{DType::kFloat16, 1e-2}, {DType::kBFloat16, 1e-2}, {DType::kFloat32, 1e-5}})
    for (const auto& [label, c] : window_computes(in)) {
      SearchSpace space(c, shipped(), Enumeration::kAmos, limits, device_cc());
      std::vector<GpuCase> cases;
      // float16: every variant of the first arm and every arm's default; the other dtypes: defaults.
      const std::vector<int> arms = window_arms(space);
      for (int arm : arms)
        for (const auto& [name, p] : window_variants(space, arm)) {
          if ((in != DType::kFloat16 || arm != arms.front()) && name != "default") continue;
          if (validate(space.entries()[arm].gemm, p, limits).empty())
            cases.push_back({label + " " + std::string(dtype_name(in)) + " " + space.entries()[arm].label + " " + name,
                             space.entries()[arm].gemm, p, tol});
        }
      ASSERT_FALSE(cases.empty()) << label;
      run_cases(c, cases, seed++);
      cases_run += static_cast<int>(cases.size());
    }
  EXPECT_GT(cases_run, 150);
}

}  // namespace
}  // namespace tmap
