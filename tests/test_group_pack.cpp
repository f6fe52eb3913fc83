// Group packing (ir/group_pack.h, ScheduleParams::group_pack): a grouped convolution's groups
// packed into one block-diagonal product. Without a GPU: the packed compute's iterators, tensors
// and statement, its sum equal to the grouped one on the CPU reference, the packs offered and
// refused, the image's wider vectors, the search space's packed arms and their records,
// validation, and NVRTC compiles of every family's packed kernels; on the GPU (skipped without
// one): every family's packed kernels against the reference kernel of the compute as written, on
// fresh random inputs, outputs poisoned (relative L2 below 1e-2 for fp16 inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gpu_cases.h"
#include "test_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/gemm/contiguity.h"
#include "tmap/ir/group_pack.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/search_space.h"

namespace tmap {
namespace {

using testing::have_gpu;
using testing::shipped;

Compute op(const std::string& name, const std::vector<std::string>& sets) {
  return build_compute(builtin_op(name), parse_param_overrides(sets));
}

/// ResNeXt-like: 4 channels a group in and out.
const std::vector<std::string> kNhwc = {"N=2", "C=64", "H=10", "W=12", "K=64", "groups=16", "pad=1"};
const std::vector<std::string> kNchw = {"N=2", "C=32", "H=9", "W=9", "K=32", "groups=8", "pad=1"};

bool has(const std::vector<int>& its, const Compute& c, const std::string& name) {
  return std::find(its.begin(), its.end(), c.find_iterator(name)) != its.end();
}

/// Up to `max` mappings of packed compute `c` under `hw_name` (one per match) that take the
/// packed groups into the product (gi along m or n, gj along k) and whose default schedule is
/// valid on sm_`cc`.
std::vector<std::pair<ImplicitGemm, ScheduleParams>> packed_kernels(const Compute& c, const std::string& hw_name,
                                                                    std::size_t max, int cc = 90) {
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  const DeviceLimits limits = DeviceLimits::for_arch(cc);
  std::vector<std::pair<ImplicitGemm, ScheduleParams>> out;
  const MatchReport r = match_compute(c, {hw}, Enumeration::kAmos);
  for (const Match& m : r.matches) {
    for (const Mapping& map : m.mappings) {
      ImplicitGemm g = make_implicit_gemm(c, hw, m, map);
      if (!(has(g.n_iters, c, "gi") || has(g.m_iters, c, "gi")) || !has(g.k_iters, c, "gj")) continue;
      const ScheduleParams p = default_schedule(g, limits);
      if (!validate(g, p, limits).empty()) continue;
      out.emplace_back(std::move(g), p);
      break;
    }
    if (out.size() == max) break;
  }
  return out;
}

TEST(GroupPack, PacksGroupsIntoABlockDiagonalProduct) {
  const Compute c = op("conv2d_nhwc", kNhwc);
  const GroupPack p = pack_groups(c, 4);
  ASSERT_EQ(p.why_not, "");
  const Compute& k = p.compute;
  EXPECT_EQ(k.group_pack, 4);
  EXPECT_EQ(k.statement_text(),
            "Out[n, p, q, 16*go + 4*gi + k] += I[n, p + r - 1, q + s - 1, 16*go + 4*gj + c] * "
            "Wt[16*go + 4*gi + k, -gi + gj, r, s, c]");
  EXPECT_EQ(k.tensors[1].shape, (std::vector<std::int64_t>{64, 1, 3, 3, 4}));
  EXPECT_EQ(k.tensors[1].num_elements(), c.tensors[1].num_elements());
  for (const auto& [name, extent, kind] : std::vector<std::tuple<std::string, int, IterKind>>{
           {"go", 4, IterKind::kSpatial}, {"gi", 4, IterKind::kSpatial}, {"gj", 4, IterKind::kReduction}}) {
    const int it = k.find_iterator(name);
    ASSERT_GE(it, 0) << name;
    EXPECT_EQ(k.iters[it].extent, extent) << name;
    EXPECT_EQ(k.iters[it].kind, kind) << name;
  }
  EXPECT_EQ(k.find_iterator("g"), -1);
  EXPECT_EQ(k.iteration_points(), 4 * c.iteration_points());  // the tensor work the pack trades
  // The same sums as the grouped compute: off the diagonal the filters read zero. Both layouts,
  // small integers (exact in double).
  for (const auto& [name, sets, pack] : std::vector<std::tuple<std::string, std::vector<std::string>, int>>{
           {"conv2d_nhwc", kNhwc, 4}, {"conv2d_nhwc", kNhwc, 16}, {"conv2d", kNchw, 8}, {"conv2d", kNchw, 2}}) {
    SCOPED_TRACE(name + " pack " + std::to_string(pack));
    const Compute grouped = op(name, sets);
    const GroupPack packed = pack_groups(grouped, pack);
    ASSERT_EQ(packed.why_not, "");
    std::vector<std::vector<double>> t(grouped.tensors.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      t[i].resize(static_cast<std::size_t>(grouped.tensors[i].num_elements()));
      for (std::size_t e = 0; e < t[i].size(); ++e) t[i][e] = static_cast<double>((e * 7 + i * 3) % 11) - 5;
    }
    const std::vector<double> want = cpu_reference(grouped, t), got = cpu_reference(packed.compute, t);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, want);
    EXPECT_NE(std::count(want.begin(), want.end(), 0.0), static_cast<std::ptrdiff_t>(want.size()));
  }
}

TEST(GroupPack, OffersPacksThatKeepGroupsNarrow) {
  EXPECT_EQ(group_packs(op("conv2d_nhwc", kNhwc)), (std::vector<int>{2, 4, 8, 16}));
  EXPECT_EQ(group_packs(op("conv2d_nhwc", {"C=256", "K=256", "groups=32"})), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(group_packs(op("conv2d_nhwc", {"C=1024", "K=1024", "groups=32"})), (std::vector<int>{2}));
  EXPECT_EQ(group_packs(op("conv2d", {"C=96", "K=96", "groups=3"})), (std::vector<int>{}));  // 3 groups
  EXPECT_EQ(group_packs(op("conv2d_nhwc", {"groups=1"})), (std::vector<int>{}));
  EXPECT_EQ(group_packs(op("gemm", {})), (std::vector<int>{}));
  // What cannot be packed says why.
  EXPECT_NE(pack_groups(op("gemm", {}), 2).why_not.find("no group iterator"), std::string::npos);
  EXPECT_NE(pack_groups(op("batched_gemm", {}), 2).why_not.find("no group iterator"), std::string::npos);
  const std::string odd = pack_groups(op("conv2d_nhwc", kNhwc), 3).why_not;
  EXPECT_NE(odd.find("a pack of 3 does not divide the 16 groups"), std::string::npos) << odd;
  EXPECT_NE(pack_groups(op("conv2d_nhwc", kNhwc), 1).why_not, "");
}

TEST(GroupPack, ImageRowsAreWholeVectors) {
  // A group's 4 channels are 8 bytes; 4 packed groups' 16 are two 16-byte vectors.
  const Compute c = op("conv2d_nhwc", kNhwc);
  const GroupPack p = pack_groups(c, 4);
  const HwAbstraction& hw = find_hw(shipped(), "mma_sync_fp16_fp32");
  const std::vector<int> gj_c = {p.compute.find_iterator("gj"), p.compute.find_iterator("c")};
  int packed = 0;
  for (const Match& m : match_compute(p.compute, {hw}, Enumeration::kAmos).matches)
    for (const Mapping& map : m.mappings) {
      const ImplicitGemm g = make_implicit_gemm(p.compute, hw, m, map);
      if (g.a_input != 0 || g.layout[0] != 'n' || g.k_iters.size() < 2 ||
          !std::equal(gj_c.begin(), gj_c.end(), g.k_iters.end() - 2))
        continue;
      EXPECT_EQ(max_vector_width(g, 0), 8) << map.id;
      ++packed;
    }
  EXPECT_GT(packed, 0);
  // As written, the image's rows along k stop at a group's channels.
  const MatchReport r = match_compute(c, {hw}, Enumeration::kAmos);
  int checked = 0;
  for (const Mapping& map : r.matches.front().mappings) {
    const ImplicitGemm u = make_implicit_gemm(c, hw, r.matches.front(), map);
    if (u.k_iters.empty() || u.k_iters.back() != c.find_iterator("c") || u.a_input != 0 || u.layout[0] != 'n') continue;
    EXPECT_EQ(max_vector_width(u, 0), 4);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(GroupPack, SearchSpaceHasPackedArmsThatRecordsFind) {
  const Compute c = op("conv2d_nhwc", kNhwc);
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};
  SearchSpace space(c, hws, Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  std::set<int> packs;
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e) {
    const SpaceEntry& entry = space.entries()[e];
    packs.insert(entry.compute->group_pack);
    EXPECT_EQ(entry.defaults.group_pack, entry.compute->group_pack);
    EXPECT_EQ(entry.gemm.compute->group_pack, entry.compute->group_pack);
    // A record names the packed compute's iterators and the pack; it finds its arm again.
    const CandidateRef ref = space.ref(e, entry.defaults);
    EXPECT_EQ(ref.params.group_pack, entry.compute->group_pack);
    EXPECT_EQ(space.find(ref), e) << candidate_label(ref);
    const std::string label = candidate_label(ref), packed_by = " groups packed by " + std::to_string(ref.params.group_pack);
    EXPECT_EQ(label.find(" groups packed by") != std::string::npos, entry.compute->group_pack > 1) << label;
    if (entry.compute->group_pack > 1) EXPECT_NE(label.find(packed_by), std::string::npos) << label;
    if (entry.compute->group_pack == 1) continue;
    // The same mapping without its pack names iterators the compute as written lacks.
    CandidateRef unpacked = ref;
    unpacked.params.group_pack = 1;
    if (std::count(ref.axes[1].begin(), ref.axes[1].end(), "gi")) EXPECT_EQ(space.find(unpacked), -1);
  }
  EXPECT_EQ(packs, (std::set<int>{1, 2, 4, 8, 16}));
  // A schedule of the wrong pack is refused, naming the right one.
  const Compute packed = pack_groups(c, 4).compute;
  const auto kernels = packed_kernels(packed, "mma_sync_fp16_fp32", 1);
  ASSERT_FALSE(kernels.empty());
  ScheduleParams p = kernels.front().second;
  EXPECT_EQ(p.group_pack, 4);
  p.group_pack = 1;
  const auto issues = validate(kernels.front().first, p, DeviceLimits::for_arch(90));
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues.front().detail.find("group_pack = 1 on a mapping of groups packed by 4; use 4"), std::string::npos)
      << issues.front().detail;
}

/// The packs the kernel tests run: both layouts, at packs 4 and 16 (NHWC) and 8 (NCHW).
struct PackedOp {
  explicit PackedOp(const std::string& name, const std::vector<std::string>& sets, int pack)
      : c(op(name, sets)), packed(pack_groups(c, pack)), pack(pack) {}
  Compute c;
  GroupPack packed;  // the cases' gemms point into it
  int pack;
};
std::vector<PackedOp> packed_ops() {
  std::vector<PackedOp> out;
  out.emplace_back("conv2d_nhwc", kNhwc, 4);
  out.emplace_back("conv2d_nhwc", kNhwc, 16);
  out.emplace_back("conv2d", kNchw, 8);
  return out;
}

/// Every family's packed kernels of `x` (the NCHW image also through its channels-last copy,
/// relayout 1), each also split in two.
std::vector<testing::GpuCase> packed_cases(const PackedOp& x, int cc) {
  EXPECT_EQ(x.packed.why_not, "");
  const Compute& c = x.c;
  const int pack = x.pack;
  std::vector<std::string> hws = {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "simt_fp16_fp32"};
  if (cc == 90) hws.push_back("wgmma_fp16_fp32");
  std::vector<testing::GpuCase> out;
  for (const std::string& hw : hws)
    for (const auto& [g, s] : packed_kernels(x.packed.compute, hw, 2, cc)) {
      const std::string label = c.name + " pack " + std::to_string(pack) + " " + hw + " " + g.layout + " map " +
                                std::to_string(g.mapping_id);
      out.push_back({label, g, s, 1e-2});
      ScheduleParams split = s;
      split.split_k = 2;
      if (validate(g, split, DeviceLimits::for_arch(cc)).empty()) out.push_back({label + " split 2", g, split, 1e-2});
      ScheduleParams relayout = s;
      relayout.relayout = 1;
      if (validate(g, relayout, DeviceLimits::for_arch(cc)).empty()) out.push_back({label + " relayout", g, relayout, 1e-2});
    }
  return out;
}

TEST(GroupPack, EveryFamilysPackedKernelsCompile) {
  std::vector<std::string> failures;
  std::size_t kernels = 0;
  const std::vector<PackedOp> ops = packed_ops();
  for (int cc : {80, 90}) {
    NvrtcCompiler compiler(cc);
    std::vector<CompileJob> jobs;
    std::vector<std::string> labels;
    for (const PackedOp& x : ops)
      for (const testing::GpuCase& gc : packed_cases(x, cc)) {
        const KernelSource k = emit_kernel(gc.g, gc.p);
        jobs.push_back({k.name, k.code});
        labels.push_back(gc.label + " sm_" + std::to_string(cc));
      }
    for (const auto& [i, r] : testing::compile_sweep(compiler, jobs))
      if (!r.ok) failures.push_back(labels[i] + ":\n" + r.log);
    kernels += jobs.size();
  }
  EXPECT_GE(kernels, 30u);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
}

// ---- On the GPU --------------------------------------------------------------------------

TEST(Gpu, GroupPackedKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  const int cc = testing::device_cc();
  std::uint64_t seed = 5200;
  std::size_t runs = 0;
  for (const PackedOp& x : packed_ops()) {
    const std::vector<testing::GpuCase> cases = packed_cases(x, cc);
    runs += cases.size();
    testing::run_cases(x.c, cases, seed++);  // the reference of the compute as written
  }
  EXPECT_GE(runs, 15u);
}

}  // namespace
}  // namespace tmap
