// Kernels for a range of sizes (`--set M=1..256`): the compute of the largest size with a
// dynamic extent, the rules that make a size run-time, every family's kernels compiled with
// NVRTC, their launch plans, and on a GPU each kernel run at sizes across its range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_cases.h"
#include "test_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/match/matcher.h"
#include "tmap/runtime/launch.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/features.h"

namespace tmap {
namespace {

using testing::shipped;
using testing::user_error_of;

Compute op_with(const std::string& op, const std::vector<std::string>& sets, const std::string& epilogue = "") {
  ComputeDef def = builtin_op(op);
  if (!epilogue.empty()) {
    SourceText text("--epilogue", epilogue);
    set_epilogue(def, epilogue, locator_for(text), SourceLoc::whole("--epilogue"));
  }
  return build_compute(def, parse_param_overrides(sets));
}

TEST(Dynamic, ARangeBuildsItsLargestShapeAndCutsDownToEverySize) {
  const Compute c = op_with("gemm_nt", {"M=1..256", "N=96", "K=64"});
  ASSERT_TRUE(c.dynamic.active());
  EXPECT_EQ(c.iters[c.dynamic.iter].name, "m");
  EXPECT_EQ(c.dynamic.param, "M");
  EXPECT_EQ(c.dynamic.lo, 1);
  EXPECT_EQ(c.dynamic.hi, 256);
  EXPECT_EQ(c.iters[c.dynamic.iter].extent, 256);
  const Compute at = compute_at(c, 57);
  EXPECT_FALSE(at.dynamic.active());
  EXPECT_EQ(at.tensors[0].shape, (std::vector<std::int64_t>{57, 64}));  // A
  EXPECT_EQ(at.tensors[1].shape, (std::vector<std::int64_t>{96, 64}));  // B
  EXPECT_EQ(at.tensor_of(at.output).shape, (std::vector<std::int64_t>{57, 96}));
  EXPECT_EQ(workload_key(at), workload_key(op_with("gemm_nt", {"M=57", "N=96", "K=64"})));
  // The range is part of the workload, and survives a log's round trip.
  const Compute fixed = op_with("gemm_nt", {"M=256", "N=96", "K=64"});
  EXPECT_NE(workload_key(c), workload_key(fixed));
  EXPECT_EQ(to_json(compute_from_json(to_json(c), "record")), to_json(c));
  const Compute rebuilt = rebuild_recorded_compute(to_json(c), workload_key(c), "record");
  EXPECT_EQ(rebuilt.dynamic, c.dynamic);
  // A recorded range is checked as a compute file's would be: its parameter reaches exported code.
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"param", "M */ int x; /*"}, {"param", "M\n#include"}, {"lo", 0}, {"hi", 255}, {"iterator", 2}}) {
    nlohmann::json j = to_json(c);
    j["dynamic"][field] = value;
    EXPECT_NE(user_error_of([&] { compute_from_json(j, "record"); }).find("malformed compute description"),
              std::string::npos) << field << " " << value;
  }
  // A convolution's batch, and a residual read along the range.
  const Compute conv = op_with("conv2d_nhwc", {"N=1..16", "H=14", "W=14", "C=64", "K=64"});
  EXPECT_EQ(conv.iters[conv.dynamic.iter].name, "n");
  EXPECT_EQ(compute_at(conv, 3).tensors[0].shape[0], 3);
  const Compute fused = op_with("gemm_nt", {"M=1..64", "N=32", "K=32"}, "Y[m, n] = C[m, n] + R[m, n]");
  ASSERT_TRUE(fused.dynamic.active());
  const Compute fused_at = compute_at(fused, 5);
  for (const Access& a : fused_at.epilogue.operands) EXPECT_EQ(fused_at.tensor_of(a).shape[0], 5);
}

TEST(Dynamic, RangesThatKernelsCannotTakeAreRefusedWithTheRule) {
  auto error = [](const std::string& op, const std::vector<std::string>& sets) {
    return user_error_of([&] { op_with(op, sets); });
  };
  EXPECT_NE(error("gemm", {"K=1..64"}).find("'k' is a reduction"), std::string::npos);
  EXPECT_NE(error("gemm", {"M=1..64", "N=1..64"}).find("only one parameter may be a range"), std::string::npos);
  EXPECT_NE(error("gemm", {"M=0..64"}).find("not 1 <= LO < HI"), std::string::npos);
  EXPECT_NE(error("gemm", {"M=64..64"}).find("not 1 <= LO < HI"), std::string::npos);
  EXPECT_NE(error("gemm", {"M=1..5000"}).find("at most 4096 sizes"), std::string::npos);
  EXPECT_NE(error("gemm", {"M=1..x"}).find("an integer or a range"), std::string::npos);
  // The image height moves an output position and a padded input dimension, not dimension 0.
  EXPECT_NE(error("conv2d_nhwc", {"H=8..16"}).find("cannot be taken at run time"), std::string::npos);
  // A GEMM's N indexes the last dimension of the output.
  EXPECT_NE(error("gemm", {"N=8..16"}).find("dimension 0"), std::string::npos);
  // y[m] of a matrix-vector product: the only dimension, copied in vectors.
  EXPECT_NE(error("gemv", {"M=8..16"}).find("the only dimension"), std::string::npos);
  // The import of a model takes one size per dimension.
}

/// Every match's mappings of `c` on abstraction `hw_name` whose schedules accept the range,
/// and the reasons of those that do not.
struct RangeGemms {
  std::vector<ImplicitGemm> ok;
  std::vector<std::string> refused;
};
RangeGemms range_gemms(const Compute& c, const std::string& hw_name) {
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  RangeGemms out;
  for (const Match& m : match_compute(c, {hw}, Enumeration::kAll).matches)
    for (const Mapping& map : m.mappings) {
      ImplicitGemm g = make_implicit_gemm(c, hw, m, map);
      const std::string why = dynamic_gemm_error(g);
      if (why.empty()) out.ok.push_back(g);
      else out.refused.push_back(why);
    }
  // The fullest fusions first (a convolution's n, p and q all on m), as the tuner favours them.
  std::stable_sort(out.ok.begin(), out.ok.end(),
                   [](const ImplicitGemm& a, const ImplicitGemm& b) { return a.per_size > b.per_size; });
  return out;
}

/// The first of `gemms` whose default schedule, changed by `tweak`, is valid; nullptr if none.
const ImplicitGemm* first_taking(const std::vector<ImplicitGemm>& gemms, const DeviceLimits& limits,
                                 const std::function<void(ScheduleParams&)>& tweak, ScheduleParams& p) {
  for (const ImplicitGemm& g : gemms) {
    p = default_schedule(g, limits);
    tweak(p);
    if (validate(g, p, limits).empty()) return &g;
  }
  return nullptr;
}

/// The grid a plan launches at `size`, as launch_plan.cpp computes it.
std::int64_t grown(const GridGrowth& w, std::int64_t size) { return (size * w.per_size + w.per_block - 1) / w.per_block * w.times; }

TEST(Dynamic, EveryFamilyCompilesKernelsThatTakeTheSizeAtRunTime) {
  std::vector<std::tuple<std::string, KernelSource, char>> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits hopper = DeviceLimits::for_arch(90);
  auto add = [&](const std::string& label, const ImplicitGemm& g, const ScheduleParams& p) {
    const auto issues = validate(g, p, hopper);
    if (!issues.empty()) return false;
    KernelSource k = emit_kernel(g, p);
    EXPECT_EQ(k.size_lo, g.compute->dynamic.lo) << label;
    EXPECT_EQ(k.size_hi, g.compute->dynamic.hi) << label;
    // The grid given is the largest size's; the growth reproduces it.
    const int axis = k.grid_growth.axis;
    EXPECT_GT(k.grid_growth.per_size, 0) << label;
    EXPECT_EQ(grown(k.grid_growth, k.size_hi), k.grid[axis]) << label;
    if (!k.reduce_name.empty()) EXPECT_EQ(grown(k.reduce_growth, k.size_hi), k.reduce_blocks) << label;
    EXPECT_NE(k.code.find(g.dynamic_axis == 'm' ? "__shared__ int M;" : "__shared__ int N;"), std::string::npos) << label;
    EXPECT_NE(k.code.find(std::string(1, static_cast<char>(std::toupper(g.dynamic_axis))) + " = size * PER_SIZE;"),
              std::string::npos) << label;
    // The plan passes the size and round-trips through JSON with its growth.
    const LaunchPlan plan = plan_launch(k);
    EXPECT_EQ(to_json(launch_plan_from_json(to_json(plan))), to_json(plan)) << label;
    EXPECT_NE(to_json(plan).dump().find("\"sizes\""), std::string::npos) << label;
    jobs.push_back({label, k, g.dynamic_axis});
    return true;
  };
  auto sweep = [&](const Compute& c, const std::string& hw_name, const std::string& what) {
    const RangeGemms r = range_gemms(c, hw_name);
    ASSERT_FALSE(r.ok.empty()) << what << " on " << hw_name;
    int added = 0;
    std::set<std::string> layouts;
    for (const ImplicitGemm& g : r.ok) {
      // The fullest fusion of each layout, with the size on either axis.
      if (!layouts.insert(g.layout + g.dynamic_axis).second) continue;
      const ScheduleParams d = default_schedule(g, hopper);
      std::vector<ScheduleParams> variants = {d};
      for (int split : {1, 3}) {
        ScheduleParams p = d;
        p.split_k = split;
        p.raster = 4;
        variants.push_back(p);
        for (int producer : {1, 2}) {
          p.producer = producer;
          variants.push_back(p);
          ScheduleParams streamed = p;  // runs of steps, the size on either axis, in both forms
          for (int form : {1, 2}) {
            streamed.stream_k = form;
            if (producer == 2) variants.push_back(streamed);
          }
          for (int cluster : {2, 3}) {
            ScheduleParams q = p;
            q.cluster = cluster;
            q.split_k = 1;
            variants.push_back(q);
          }
        }
        p.producer = 0;
        p.cluster = 1;
        variants.push_back(p);
        p.cluster = 0;
        p.split_reduce = split > 1;  // the tile's last block sums the splits
        variants.push_back(p);
      }
      for (const ScheduleParams& p : variants) {
        const std::string label = what + " " + hw_name + " " + g.layout + " map " + std::to_string(g.mapping_id) + " " +
                                  to_json(p).dump();
        added += add(label, g, p);
      }
    }
    EXPECT_GE(added, 2) << what << " on " << hw_name;
  };
  keep.push_back(std::make_unique<Compute>(op_with("gemm_nt", {"M=1..300", "N=200", "K=128"})));
  for (const char* hw : {"wgmma_fp16_fp32", "mma_sync_fp16_fp32", "wmma_fp16_fp32", "simt_fp16_fp32"})
    sweep(*keep.back(), hw, "gemm_nt M=1..300");
  keep.push_back(std::make_unique<Compute>(op_with("gemm_nt", {"M=1..100", "N=128", "K=64"}, "Y[m, n] = relu(C[m, n] + R[m, n])")));
  sweep(*keep.back(), "wgmma_fp16_fp32", "gemm_nt+residual M=1..100");
  sweep(*keep.back(), "mma_sync_fp16_fp32", "gemm_nt+residual M=1..100");
  keep.push_back(std::make_unique<Compute>(op_with("conv2d_nhwc", {"N=1..16", "H=14", "W=14", "C=64", "K=64"})));
  sweep(*keep.back(), "wgmma_fp16_fp32", "conv2d_nhwc N=1..16");
  sweep(*keep.back(), "mma_sync_fp16_fp32", "conv2d_nhwc N=1..16");
  // A TMA producer's map of the operand on the dynamic axis follows the size (an im2col map's
  // batch, a tiled map's rows); the other's is fixed.
  int grown_maps = 0;
  std::set<char> axes;
  for (const auto& [label, k, axis] : jobs) {
    axes.insert(axis);
    for (const TensorMapSpec& m : k.tensor_maps) {
      EXPECT_EQ(m.grow_per_size > 0, m.operand == (axis == 'm' ? 0 : 1)) << label;
      if (m.grow_per_size == 0) continue;
      EXPECT_EQ(m.dims[m.grow_dim], m.grow_per_size * static_cast<std::uint64_t>(k.size_hi)) << label;
      ++grown_maps;
    }
  }
  EXPECT_GT(grown_maps, 4);
  EXPECT_EQ(axes.size(), 2u) << "kernels with the size on the virtual M and on N";

  std::vector<CompileJob> sources;
  for (const auto& [label, k, axis] : jobs) sources.push_back({k.name, k.code});
  NvrtcCompiler compiler(90);
  const auto results = testing::compile_sweep(compiler, sources);
  int failed = 0;
  for (const auto& [i, r] : results)
    if (!r.ok && failed++ == 0) ADD_FAILURE() << std::get<0>(jobs[i]) << ":\n" << r.log;
  std::printf("%zu kernels of a range, %zu compiled for sm_90, %d failed\n", jobs.size(), results.size(), failed);
}

TEST(Dynamic, ASampleOfARangeRunsTheRangesKernelsAndIsModelledAtItsSize) {
  const Compute c = op_with("gemm_nt", {"M=1..256", "N=96", "K=64"});
  const Compute s = range_sample(c, 57);
  EXPECT_EQ(s.dynamic.at, 57);
  // A workload of its own, neither the range's nor the shape's; its shape at the size is the range's.
  EXPECT_NE(workload_key(s), workload_key(c));
  EXPECT_NE(workload_key(s), workload_key(compute_at(c, 57)));
  EXPECT_EQ(to_json(compute_at(s, 57)), to_json(compute_at(c, 57)));
  EXPECT_EQ(compute_from_json(to_json(s), "record").dynamic, s.dynamic);
  for (int bad : {0, 257}) {
    nlohmann::json j = to_json(s);
    j["dynamic"]["at"] = bad;
    EXPECT_NE(user_error_of([&] { compute_from_json(j, "record"); }).find("sample size outside the range"),
              std::string::npos) << bad;
  }
  // The same kernels (one compile serves every sample); the models see the sample's size.
  const RangeGemms range = range_gemms(c, "wgmma_fp16_fp32"), sample = range_gemms(s, "wgmma_fp16_fp32");
  ASSERT_EQ(range.ok.size(), sample.ok.size());
  const DeviceModel d = DeviceModel::for_arch(90);
  const std::size_t log2_m = feature_index("log2_M"), log2_n = feature_index("log2_N");
  int faster = 0;
  for (std::size_t i = 0; i < range.ok.size(); ++i) {
    const ImplicitGemm &gr = range.ok[i], &gs = sample.ok[i];
    const ScheduleParams p = default_schedule(gr, DeviceLimits::for_arch(90));
    EXPECT_EQ(emit_kernel(gs, p).code, emit_kernel(gr, p).code) << i;
    const Features fr = candidate_features(gr, p, d), fs = candidate_features(gs, p, d);
    const std::size_t axis = gr.dynamic_axis == 'm' ? log2_m : log2_n;
    EXPECT_FLOAT_EQ(fs[axis], std::log2(57.0 * gr.per_size)) << i;
    EXPECT_FLOAT_EQ(fr[axis], std::log2(256.0 * gr.per_size)) << i;
    EXPECT_LE(analytic_time_us(gs, p, d), analytic_time_us(gr, p, d)) << i;
    faster += analytic_time_us(gs, p, d) < analytic_time_us(gr, p, d);
  }
  EXPECT_GT(faster, 0);
}

TEST(Dynamic, SchedulesAndMappingsThatFixTheSizeAreRefused) {
  const Compute c = op_with("conv2d", {"N=1..16", "H=14", "W=14", "C=64", "K=64"});
  const RangeGemms r = range_gemms(c, "mma_sync_fp16_fp32");
  ASSERT_FALSE(r.ok.empty());
  // Mappings that put the batch among the inner m iterators or in the grid.
  ASSERT_FALSE(r.refused.empty());
  EXPECT_NE(r.refused.front().find("slowest iterator of the virtual M"), std::string::npos) << r.refused.front();
  ScheduleParams p = default_schedule(r.ok.front(), DeviceLimits::for_arch(90));
  p.relayout = 1;
  bool said = false;
  for (const ScheduleIssue& i : validate(r.ok.front(), p, DeviceLimits::for_arch(90)))
    said |= i.detail.find("a run-time size takes 0") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Dynamic, PlansOfOneShapeTakeNoSizeAndPlansOfARangeOnlyTheirs) {
  tmap_launch_plan fixed{};
  EXPECT_TRUE(tmap_plan_takes_size(&fixed, 0));
  EXPECT_FALSE(tmap_plan_takes_size(&fixed, 5));
  tmap_launch_plan range{};
  range.size_lo = 1;
  range.size_hi = 256;
  EXPECT_FALSE(tmap_plan_takes_size(&range, 0));
  EXPECT_TRUE(tmap_plan_takes_size(&range, 1));
  EXPECT_TRUE(tmap_plan_takes_size(&range, 256));
  EXPECT_FALSE(tmap_plan_takes_size(&range, 257));
  // A plan file cannot make a grid or a map grow past what its largest size launches.
  const Compute c = op_with("gemm_nt", {"M=1..64", "N=64", "K=64"});
  const RangeGemms r = range_gemms(c, "mma_sync_fp16_fp32");
  ASSERT_FALSE(r.ok.empty());
  nlohmann::json j = to_json(plan_launch(emit_kernel(r.ok.front(), default_schedule(r.ok.front(), DeviceLimits::for_arch(90)))));
  j["steps"][0]["growth"][1] = 1000;
  EXPECT_THROW(launch_plan_from_json(j), std::runtime_error);
  j.erase("sizes");
  EXPECT_THROW(launch_plan_from_json(j), std::runtime_error);
}

// On the GPU: each kernel of a range runs at sizes across it against the reference of that size.
TEST(GpuDynamic, KernelsOfARangeVerifyAtEverySizeTheyAreGiven) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device";
  const int cc = testing::device_cc();
  const DeviceLimits limits = DeviceLimits::for_arch(cc);
  struct Case {
    std::string label;
    Compute c;
    std::string hw;
    std::function<void(ScheduleParams&)> tweak;
    char axis = 'm';  ///< The virtual axis the size is on ('n': the swapped product of decode GEMMs).
  };
  std::vector<Case> cases;
  const Compute gemm = op_with("gemm_nt", {"M=1..300", "N=256", "K=512"});
  const Compute conv = op_with("conv2d_nhwc", {"N=1..9", "H=14", "W=14", "C=64", "K=64"});
  const Compute fused = op_with("gemm_nt", {"M=1..200", "N=128", "K=256"}, "Y[m, n] = relu(C[m, n] + R[m, n])");
  cases.push_back({"mma_sync split 3", gemm, "mma_sync_fp16_fp32", [](ScheduleParams& p) { p.split_k = 3; p.raster = 2; }});
  cases.push_back({"wmma", gemm, "wmma_fp16_fp32", [](ScheduleParams&) {}});
  cases.push_back({"simt", gemm, "simt_fp16_fp32", [](ScheduleParams&) {}});
  cases.push_back({"mma_sync conv", conv, "mma_sync_fp16_fp32", [](ScheduleParams&) {}});
  cases.push_back({"mma_sync residual", fused, "mma_sync_fp16_fp32", [](ScheduleParams& p) { p.split_k = 2; }});
  cases.push_back({"mma_sync split 3 last", gemm, "mma_sync_fp16_fp32", [](ScheduleParams& p) { p.split_k = 3; p.split_reduce = 1; }});
  cases.push_back({"mma_sync on n", gemm, "mma_sync_fp16_fp32", [](ScheduleParams& p) { p.split_k = 3; p.raster = 2; }, 'n'});
  if (cc >= 90) {
    cases.push_back({"wgmma tma", gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.producer = 1; p.split_k = 1; }});
    // A persistent kernel keeps its epilogue tile beside the ring: narrower tiles, fewer stages.
    auto persistent = [](int cluster) {
      return [cluster](ScheduleParams& p) {
        p.producer = 2;
        p.split_k = 1;
        p.cluster = cluster;
        p.block_n = p.warp_n = 128;
        p.stages = 3;
      };
    };
    cases.push_back({"wgmma persistent", gemm, "wgmma_fp16_fp32", persistent(0)});
    auto streamed = [&](ScheduleParams& p) { persistent(0)(p); p.stream_k = 1; };
    cases.push_back({"wgmma stream-K", gemm, "wgmma_fp16_fp32", streamed});
    cases.push_back({"wgmma on n, stream-K", gemm, "wgmma_fp16_fp32", streamed, 'n'});
    cases.push_back({"wgmma im2col stream-K", conv, "wgmma_fp16_fp32", streamed});
    auto whole_first = [&](ScheduleParams& p) { persistent(0)(p); p.stream_k = 2; };
    cases.push_back({"wgmma stream-K, whole waves first", gemm, "wgmma_fp16_fp32", whole_first});
    cases.push_back({"wgmma pair", gemm, "wgmma_fp16_fp32", persistent(2)});
    cases.push_back({"wgmma cluster split", gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.split_k = 4; p.cluster = 1; }});
    cases.push_back({"wgmma im2col", conv, "wgmma_fp16_fp32", persistent(0)});
    cases.push_back({"wgmma residual", fused, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.producer = 1; p.split_k = 1; }});
    cases.push_back({"wgmma on n, tma split", gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.producer = 1; p.split_k = 4; }, 'n'});
    cases.push_back({"wgmma on n, split last", gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.producer = 1; p.split_k = 4; p.split_reduce = 1; }, 'n'});
    cases.push_back({"wgmma on n, persistent", gemm, "wgmma_fp16_fp32", persistent(0), 'n'});
    cases.push_back({"wgmma on n, pair", gemm, "wgmma_fp16_fp32", persistent(3), 'n'});
    cases.push_back({"wgmma on n, residual", fused, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.split_k = 2; }, 'n'});
  }
  NvrtcCompiler compiler(cc);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.label);
    RangeGemms r = range_gemms(k.c, k.hw);
    std::erase_if(r.ok, [&](const ImplicitGemm& g) { return g.dynamic_axis != k.axis; });
    ScheduleParams p;
    const ImplicitGemm* taking = first_taking(r.ok, limits, k.tweak, p);
    ASSERT_NE(taking, nullptr) << "no mapping takes the schedule";
    const ImplicitGemm& g = *taking;
    const KernelSource kernel = emit_kernel(g, p);
    const CompileResult compiled = compiler.compile(kernel.code, kernel.name);
    ASSERT_TRUE(compiled.ok) << compiled.log;
    const std::int64_t hi = k.c.dynamic.hi;
    for (std::int64_t size : {std::int64_t{1}, std::int64_t{2}, std::int64_t{7}, hi / 2 + 1, hi - 1, hi}) {
      const Compute at = compute_at(k.c, size);
      Workspace ws(at, 100 + size);
      const std::vector<double> reference = gpu_reference(ws, compiler);
      const KernelRun run = run_candidate(ws, reference, at.inputs[g.a_input].tensor, at.inputs[g.b_input].tensor,
                                          kernel, compiled.cubin, {}, size);
      ASSERT_TRUE(run.ok) << "size " << size << ": " << run.error;
      EXPECT_LT(run.rel_l2, 1e-2) << "size " << size;
      std::printf("%-22s size %4lld  rel %.1e  %8.2f us\n", k.label.c_str(), static_cast<long long>(size), run.rel_l2,
                  run.median_us);
    }
    // A size outside the range is refused before anything runs.
    const Compute at = compute_at(k.c, hi);
    Workspace ws(at, 7);
    const KernelRun outside = run_candidate(ws, {}, at.inputs[g.a_input].tensor, at.inputs[g.b_input].tensor, kernel,
                                            compiled.cubin, {}, hi + 1);
    EXPECT_FALSE(outside.ok);
    EXPECT_NE(outside.error.find("takes sizes"), std::string::npos) << outside.error;
  }
}

}  // namespace
}  // namespace tmap
