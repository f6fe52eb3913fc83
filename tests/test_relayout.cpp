// Relayout views (ScheduleParams::relayout): operands copied channels-last by a prologue kernel,
// then read by the main kernel along their contiguous reduction axis. Without a GPU: which
// mappings are offered a view and why others are not, the view's tensors and reduction order,
// validation, the search space's twin arms, the launch fields' JSON, and NVRTC compiles of every
// family's view kernels; on the GPU (skipped without one): every family's view kernels against
// the reference kernel on fresh random inputs, outputs poisoned (relative L2 below 1e-2 for fp16
// inputs, 1e-3 for tf32, exact for int8).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_cases.h"
#include "test_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/search_space.h"

namespace tmap {
namespace {

using testing::have_gpu;
using testing::shipped;
using testing::typed_op;

/// The relayout views (of ScheduleParams::relayout `knob`) of `c` under abstraction `hw_name`: the
/// first offered mapping of each match, at most `max`; the reasons of the mappings refused go to
/// `why_not`.
std::vector<ImplicitGemm> views_of(const Compute& c, const std::string& hw_name, std::size_t max,
                                   std::vector<std::string>* why_not = nullptr, int knob = 1) {
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  std::vector<ImplicitGemm> out;
  const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  for (const Match& m : r.matches) {
    for (const Mapping& map : m.mappings) {
      RelayoutView v = relayout_view(make_implicit_gemm(c, hw, m, map), knob);
      if (v.why_not.empty()) {
        out.push_back(std::move(v.gemm));
        break;
      }
      if (why_not) why_not->push_back(v.why_not);
    }
    if (out.size() == max) break;
  }
  return out;
}

Compute op(const std::string& name, const std::vector<std::string>& sets) {
  return build_compute(builtin_op(name), parse_param_overrides(sets));
}


/// The view's schedule: the default for sm_90 (or `cc`), with relayout on (and fragments in panels
/// where WMMA's rows would misalign them).
ScheduleParams view_schedule(const ImplicitGemm& g, int cc = 90) {
  ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(cc));
  p.relayout = std::max(1, g.relayout_knob);
  if (!validate(g, p, DeviceLimits::for_arch(cc)).empty()) {
    ScheduleParams panels = p;
    panels.panels = 1;
    if (validate(g, panels, DeviceLimits::for_arch(cc)).empty()) return panels;
  }
  return p;
}

/// Up to `max` views of `c` under `hw_name` (one per match) whose view_schedule() is valid.
std::vector<std::pair<ImplicitGemm, ScheduleParams>> schedulable_views(const Compute& c, const std::string& hw_name,
                                                                       std::size_t max, int cc = 90, int knob = 1) {
  std::vector<std::pair<ImplicitGemm, ScheduleParams>> out;
  for (ImplicitGemm& g : views_of(c, hw_name, 64, nullptr, knob)) {
    ScheduleParams p = view_schedule(g, cc);
    if (validate(g, p, DeviceLimits::for_arch(cc)).empty()) out.emplace_back(std::move(g), p);
    if (out.size() == max) break;
  }
  return out;
}

TEST(Relayout, NchwConvolutionReadsNhwcCopies) {
  const Compute c = op("conv2d", {"N=2", "C=64", "H=15", "W=15", "K=96", "pad=1"});
  const std::vector<ImplicitGemm> views = views_of(c, "mma_sync_fp16_fp32", 8);
  ASSERT_FALSE(views.empty()) << "an NCHW 3x3 convolution has no aligned 16-byte reads in place; a view is offered";
  const int ci = c.find_iterator("c");
  for (const ImplicitGemm& g : views) {
    ASSERT_TRUE(g.relayouted());
    EXPECT_EQ(g.k_iters.back(), ci) << "the input channels become the innermost reduction";
    EXPECT_NE(g.compute, &c);
    for (int which = 0; which < 2; ++which) {
      const Access& a = g.compute->inputs[which == 0 ? g.a_input : g.b_input];
      const Tensor& t = g.compute->tensor_of(a);
      const OperandRelayout& r = g.relayout[which];
      ASSERT_TRUE(r.active) << t.name;
      EXPECT_EQ(r.bytes, 2);
      EXPECT_EQ(a.indices.back().coef(ci), 1) << t.name << ": channels last";
      if (t.name == "I") {
        EXPECT_EQ(t.shape, (std::vector<std::int64_t>{2, 15, 15, 64}));  // NHWC
        EXPECT_EQ(std::vector<std::int64_t>({r.outer, r.moved, r.inner}), (std::vector<std::int64_t>{2, 64, 225}));
      } else {
        EXPECT_EQ(t.shape, (std::vector<std::int64_t>{96, 3, 3, 64}));  // KRSC
        EXPECT_EQ(std::vector<std::int64_t>({r.outer, r.moved, r.inner}), (std::vector<std::int64_t>{96, 64, 9}));
      }
      // Stored along k by this mapping's layout, the copy is read in aligned 16-byte vectors.
      if (!stored_along_mn(g, which))
        EXPECT_EQ(operand_contiguity(g, which).aligned, 8) << t.name << ": aligned 16-byte vectors in the view";
    }
    // The user's compute is untouched: the view owns its copy.
    EXPECT_EQ(c.tensors[c.inputs[0].tensor].shape, (std::vector<std::int64_t>{2, 64, 15, 15}));
    EXPECT_EQ(g.M * g.N * g.K, c.iteration_points() / (g.batch * g.serial));
  }
  // 1x1 filters [K][C][1][1] are already channels-last in memory: a strided 1x1 convolution's view
  // copies its input alone and reads the filters in place.
  const Compute s2 = op("conv2d", {"N=2", "C=64", "H=16", "W=16", "K=96", "R=1", "S=1", "stride=2", "pad=0"});
  const std::vector<ImplicitGemm> s2v = views_of(s2, "mma_sync_fp16_fp32", 8);
  ASSERT_FALSE(s2v.empty());
  for (const ImplicitGemm& g : s2v)
    for (int which = 0; which < 2; ++which) {
      const Tensor& t = g.compute->tensor_of(g.compute->inputs[which == 0 ? g.a_input : g.b_input]);
      EXPECT_EQ(g.relayout[which].active, t.name == "I") << t.name;
      EXPECT_EQ(g.compute->inputs[which == 0 ? g.a_input : g.b_input].indices.back().coef(ci), 1) << t.name;
    }
  // A strided 1-D and a 3-D convolution are offered views too (NCW -> NWC, NCDHW -> NDHWC).
  EXPECT_FALSE(views_of(op("conv1d", {"N=2", "C=32", "W=40", "K=32", "stride=2"}), "mma_sync_fp16_fp32", 1).empty());
  const Compute v3 = op("conv3d", {"N=1", "C=16", "D=5", "H=6", "W=7", "K=32", "pad=1"});
  const std::vector<ImplicitGemm> v3s = views_of(v3, "mma_sync_fp16_fp32", 1);
  ASSERT_FALSE(v3s.empty());
  for (const OperandRelayout& r : v3s[0].relayout)
    if (r.active && r.outer == 1) EXPECT_EQ(r.inner, 5 * 6 * 7);  // the input: [1][16][D*H*W]
}

TEST(Relayout, PrologueTransposesInRegistersWhereVectorsDivideTheExtents) {
  // A lane of the prologue moves a V x V block (V vectors in, transposed in registers, V out),
  // V the widest vector of at most 16 bytes dividing both the channels (moved) and the pixels
  // (inner), where that makes at least 128 blocks; else 32 x 32 tiles through shared memory. Rows
  // shorter than 32 (a 3x3 filter's taps) of more than 64 channels are copied whole, as many
  // channels' as the block needs (up to 256), in 16-byte vectors; those of 64 or fewer are
  // gathered, 2048 a block.
  struct Case {
    std::vector<std::string> sets;
    std::string input_copy;   // the call copying the input
    std::int64_t input_blocks;
    std::string filter_copy;  // the call copying the [K][C][9] filters
    std::int64_t filter_blocks;
  };
  const std::vector<Case> cases = {
      // ResNet-18 l1 at batch 16: [16][64][3136] in blocks of 64 channels x 256 pixels; filters of
      // 64 channels gathered.
      {{"N=16", "C=64", "H=56", "W=56", "K=64", "pad=1"}, "relayout_transpose_v<unsigned short, uint4, 8>", 16 * 1 * 13,
       "relayout_gather<unsigned short, 256, 2048>(", (64 * 64 * 9 + 2047) / 2048},
      // 28 x 28 = 784 pixels, 128 channels: exactly 128 blocks of 64 x 256; a block per filter.
      {{"N=16", "C=128", "H=28", "W=28", "K=128", "pad=1"}, "relayout_transpose_v<unsigned short, uint4, 8>",
       16 * 2 * 4, "relayout_rows<unsigned short, 9, 128, 256>(", 128},
      // 14 x 14 = 196 pixels: 4-element (8-byte) vectors, blocks of 32 x 128.
      {{"N=16", "C=256", "H=14", "W=14", "K=256", "pad=1"}, "relayout_transpose_v<unsigned short, uint2, 4>", 16 * 8 * 2,
       "relayout_rows<unsigned short, 9, 256, 256>(", 256},
      // 7 x 7 = 49 pixels: no vector divides them.
      {{"N=2", "C=64", "H=7", "W=7", "K=64", "pad=1"}, "relayout_transpose(", 2 * 2 * 2, "relayout_gather<unsigned short, 256, 2048>(",
       (64 * 64 * 9 + 2047) / 2048},
      // Batch 1 of the first: 13 register-transpose blocks would leave most SMs idle; 196 tiles.
      {{"N=1", "C=64", "H=56", "W=56", "K=64", "pad=1"}, "relayout_transpose(", 1 * 2 * 98, "relayout_gather<unsigned short, 256, 2048>(",
       (64 * 64 * 9 + 2047) / 2048},
  };
  for (const Case& t : cases) {
    const Compute c = op("conv2d", t.sets);
    const std::vector<ImplicitGemm> views = views_of(c, "mma_sync_fp16_fp32", 1);
    ASSERT_FALSE(views.empty()) << t.sets[2];
    const ImplicitGemm& g = views[0];
    const KernelSource k = emit_kernel(g, view_schedule(g));
    const int image = g.compute->tensor_of(g.compute->inputs[g.a_input]).name == "I" ? 0 : 1;
    ASSERT_TRUE(g.relayout[image].active);
    ASSERT_TRUE(g.relayout[1 - image].active) << "3x3 KCRS filters are copied too";
    EXPECT_EQ(k.relayout_blocks, t.input_blocks + t.filter_blocks) << t.sets[2];
    EXPECT_NE(k.code.find(t.input_copy), std::string::npos) << t.sets[2];
    EXPECT_NE(k.code.find("    " + t.filter_copy + "reinterpret_cast"), std::string::npos) << t.sets[2] << ": the filters' 9 taps";
    EXPECT_EQ(k.code.find("relayout_transpose_v") != std::string::npos,
              t.input_copy.find("relayout_transpose_v") != std::string::npos)
        << t.sets[2] << ": the register transpose is emitted only where it is used";
    // The main kernel may launch once every block has copied its part, not as soon as it starts
    // (the prologue's trigger follows both copies' calls).
    const std::size_t prologue = k.code.find(k.relayout_name + "(");
    ASSERT_NE(prologue, std::string::npos);
    const std::size_t trigger = k.code.find("griddepcontrol.launch_dependents", prologue);
    ASSERT_NE(trigger, std::string::npos) << t.sets[2];
    EXPECT_GT(trigger, k.code.find("    " + t.filter_copy + "reinterpret_cast", prologue)) << t.sets[2];
    EXPECT_GT(trigger, k.code.find("    " + t.input_copy, prologue)) << t.sets[2];
  }
}

TEST(Relayout, FewChannelsArePaddedToWholeVectors) {
  // A first layer (C = 3, 7 x 7, stride 2): three channels are 6 bytes, no aligned vector in either
  // layout, so both operands are copied with the channels padded to 8 (zeros), NHWC and KRSC too.
  for (const std::string name : {"conv2d", "conv2d_nhwc"}) {
    SCOPED_TRACE(name);
    const Compute c = op(name, {"N=2", "C=3", "H=32", "W=30", "K=64", "R=7", "S=7", "stride=2", "pad=3"});
    const std::vector<ImplicitGemm> views = views_of(c, "mma_sync_fp16_fp32", 8);
    ASSERT_FALSE(views.empty());
    for (const ImplicitGemm& g : views) {
      const int ci = g.k_iters.back();
      EXPECT_EQ(g.compute->iters[ci].name, "c");
      EXPECT_EQ(g.compute->iters[ci].extent, 8);
      std::int64_t k = 1;
      for (int it : g.k_iters) k *= g.compute->iters[it].extent;
      EXPECT_EQ(g.K, k);
      EXPECT_EQ(k % 8, 0) << "the padded channels are the innermost of k";
      const int image = g.compute->tensor_of(g.compute->inputs[g.a_input]).name == "I" ? 0 : 1;
      const OperandRelayout& in = g.relayout[image];
      const OperandRelayout& wt = g.relayout[1 - image];
      ASSERT_TRUE(in.active && wt.active);
      EXPECT_EQ(in.moved, 3);
      EXPECT_EQ(in.copy_moved(), 8);
      EXPECT_EQ(wt.copy_moved(), 8);
      EXPECT_EQ(in.copy_elements(), in.elements() / 3 * 8);
      // NCHW: [N][C][H W] -> [N][H W][8]; NHWC: [N H W][C][1] -> [N H W][1][8]. KCRS and KRSC alike.
      EXPECT_EQ(in.inner, name == "conv2d" ? 32 * 30 : 1);
      EXPECT_EQ(wt.inner, name == "conv2d" ? 49 : 1);
      int widest = 0;
      for (int which = 0; which < 2; ++which) {
        EXPECT_EQ(g.compute->tensor_of(g.compute->inputs[which == 0 ? g.a_input : g.b_input]).shape.back(), 8);
        widest = std::max(widest, operand_contiguity(g, which).aligned);
      }
      EXPECT_EQ(widest, 8) << "an operand is read in aligned 16-byte vectors";
      const KernelSource kernel = emit_kernel(g, view_schedule(g));
      // Each destination row (one pixel's or one tap's 8 channels) is built and stored as one
      // 16-byte vector, 4 rows a thread, 1024 a block: 1920 pixels, 64 x 49 filter taps.
      EXPECT_NE(kernel.code.find("relayout_pad_rows<unsigned short, 8, 4>(reinterpret_cast"), std::string::npos);
      EXPECT_NE(kernel.code.find("(zeros after 3)"), std::string::npos);
      EXPECT_EQ(in.outer * in.inner, 2 * 32 * 30);
      EXPECT_EQ(wt.outer * wt.inner, 64 * 49);
      const std::int64_t in_blocks = 2, wt_blocks = 4;
      EXPECT_EQ(kernel.relayout_blocks, in_blocks + wt_blocks);
      EXPECT_GE(kernel.workspace_bytes, 2 * (in.copy_elements() + wt.copy_elements()));
    }
  }
  // The padding is whole 16-byte vectors of the operands' type: 4 tf32 channels, 16 int8 ones.
  for (const auto& [hw, in_t, out_t, padded] : std::vector<std::tuple<std::string, std::string, std::string, int>>{
           {"mma_sync_tf32_fp32", "float32", "float32", 4}, {"mma_sync_int8_int32", "int8", "int32", 16}}) {
    const Compute c = typed_op("conv2d", in_t, out_t, {"N=2", "C=3", "H=12", "W=12", "K=32", "pad=1"});
    const std::vector<ImplicitGemm> views = views_of(c, hw, 1);
    ASSERT_FALSE(views.empty()) << hw;
    EXPECT_EQ(views[0].relayout[0].copy_moved(), padded) << hw;
    EXPECT_EQ(views[0].relayout[1].copy_moved(), padded) << hw;
  }
  // Channels that fill whole vectors are not padded, and their prologue has no padding code.
  const std::vector<ImplicitGemm> whole = views_of(op("conv2d", {"N=2", "C=16", "H=9", "W=9", "K=32", "pad=1"}), "mma_sync_fp16_fp32", 1);
  ASSERT_FALSE(whole.empty());
  EXPECT_FALSE(whole[0].relayout[0].pads() || whole[0].relayout[1].pads());
  EXPECT_EQ(emit_kernel(whole[0], view_schedule(whole[0])).code.find("_pad("), std::string::npos);
}

TEST(Relayout, FewChannelsArePaddedToEightByteVectorsByRelayoutTwo) {
  // relayout = 2 pads a first layer's three channels to 4 halves (one 8-byte vector), not 8: its
  // copies, tiles and multiplies are half those of relayout = 1.
  for (const std::string name : {"conv2d", "conv2d_nhwc"}) {
    SCOPED_TRACE(name);
    const Compute c = op(name, {"N=2", "C=3", "H=32", "W=30", "K=64", "R=7", "S=7", "stride=2", "pad=3"});
    const std::vector<ImplicitGemm> views = views_of(c, "mma_sync_fp16_fp32", 8, nullptr, 2);
    ASSERT_FALSE(views.empty());
    for (const ImplicitGemm& g : views) {
      EXPECT_EQ(g.relayout_knob, 2);
      EXPECT_EQ(g.compute->iters[g.k_iters.back()].extent, 4);
      EXPECT_EQ(g.K % 4, 0);
      EXPECT_EQ(g.relayout[0].copy_moved(), 4);
      EXPECT_EQ(g.relayout[1].copy_moved(), 4);
      int widest = 0;
      for (int which = 0; which < 2; ++which) widest = std::max(widest, operand_contiguity(g, which).aligned);
      EXPECT_EQ(widest, 4) << "an operand is read in aligned 8-byte vectors";
      const ScheduleParams p = view_schedule(g);
      EXPECT_EQ(p.relayout, 2);
      ASSERT_TRUE(validate(g, p, DeviceLimits::for_arch(90)).empty());
      const KernelSource kernel = emit_kernel(g, p);
      EXPECT_EQ(kernel.name.substr(kernel.name.size() - 10), "_relayout8") << kernel.name;
      EXPECT_NE(kernel.code.find("relayout_pad_rows<unsigned short, 4, 4>(reinterpret_cast"), std::string::npos);
      // Half the workspace of relayout = 1's copies.
      EXPECT_GE(kernel.workspace_bytes, 2 * (g.relayout[0].copy_elements() + g.relayout[1].copy_elements()));
      EXPECT_EQ(g.relayout[0].copy_elements(), g.relayout[0].elements() / 3 * 4);
      // A schedule of the other view's value is refused with the value to use.
      ScheduleParams other = p;
      other.relayout = 1;
      const auto issues = validate(g, other, DeviceLimits::for_arch(90));
      ASSERT_FALSE(issues.empty());
      EXPECT_NE(issues[0].detail.find("relayout = 1 on a relayout view of 2"), std::string::npos) << issues[0].detail;
    }
  }
  // int8 pads 3 channels to 8 (8 bytes) against 16; tf32 pads to 4 either way, so relayout = 2 is
  // not offered, and a channel count that is whole 16-byte vectors has no 8-byte twin either.
  const Compute i8 = typed_op("conv2d", "int8", "int32", {"N=2", "C=3", "H=12", "W=12", "K=32", "pad=1"});
  const std::vector<ImplicitGemm> narrow = views_of(i8, "mma_sync_int8_int32", 1, nullptr, 2);
  ASSERT_FALSE(narrow.empty());
  EXPECT_EQ(narrow[0].relayout[0].copy_moved(), 8);
  for (const auto& [c, hw] : std::vector<std::pair<Compute, std::string>>{
           {typed_op("conv2d", "float32", "float32", {"N=2", "C=3", "H=12", "W=12", "K=32", "pad=1"}), "mma_sync_tf32_fp32"},
           {op("conv2d", {"N=2", "C=16", "H=9", "W=9", "K=32", "pad=1"}), "mma_sync_fp16_fp32"}}) {
    std::vector<std::string> why;
    EXPECT_TRUE(views_of(c, hw, 1, &why, 2).empty()) << hw;
    EXPECT_TRUE(std::any_of(why.begin(), why.end(), [](const std::string& w) {
      return w.find("relayout = 1 covers it") != std::string::npos;
    })) << hw;
  }
}

TEST(Relayout, NotOfferedWhereOperandsAreReadInAlignedVectorsInPlace) {
  struct Case {
    std::string name;
    Compute c;
  };
  const std::vector<Case> cases = {
      {"gemm", op("gemm", {"M=128", "N=128", "K=128"})},
      {"gemm_nt", op("gemm_nt", {"M=128", "N=128", "K=128"})},
      {"conv2d_nhwc", op("conv2d_nhwc", {"N=2", "C=64", "H=15", "W=15", "K=96", "pad=1"})},
  };
  for (const Case& k : cases) {
    std::vector<std::string> why;
    EXPECT_TRUE(views_of(k.c, "mma_sync_fp16_fp32", 8, &why).empty()) << k.name;
    ASSERT_FALSE(why.empty()) << k.name;
    for (const std::string& w : why) EXPECT_FALSE(w.empty()) << k.name;
  }
  // Sub-byte operands are never copied.
  const Compute i4 = typed_op("gemm", "int4", "int32", {"M=64", "N=64", "K=128"});
  std::vector<std::string> why;
  EXPECT_TRUE(views_of(i4, "wmma_int4_int32", 4, &why).empty());
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why.front().find("sub-byte"), std::string::npos) << why.front();
}

TEST(Relayout, ValidationNamesTheProblem) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  auto has = [&](const ImplicitGemm& g, const ScheduleParams& p, const std::string& text) {
    for (const ScheduleIssue& i : validate(g, p, limits))
      if (i.error == ScheduleError::kBadOption && i.detail.find(text) != std::string::npos) return true;
    return false;
  };
  const Compute gemm = op("gemm", {"M=128", "N=128", "K=128"});
  const HwAbstraction& hw = find_hw(shipped(), "mma_sync_fp16_fp32");
  const MatchReport r = match_compute(gemm, {hw}, Enumeration::kAll);
  const ImplicitGemm g = make_implicit_gemm(gemm, hw, r.matches.front(), r.matches.front().mappings.front());
  ScheduleParams p = default_schedule(g, limits);
  ASSERT_TRUE(validate(g, p, limits).empty());
  p.relayout = 1;
  EXPECT_TRUE(has(g, p, "relayout = 1: ")) << "a GEMM is offered no view";
  p.relayout = 2;
  EXPECT_TRUE(has(g, p, "relayout = 2"));
  EXPECT_THROW((void)emit_kernel(g, view_schedule(g)), UserError);

  const Compute conv = op("conv2d", {"N=2", "C=64", "H=15", "W=15", "K=96", "pad=1"});
  const std::vector<ImplicitGemm> views = views_of(conv, "mma_sync_fp16_fp32", 1);
  ASSERT_FALSE(views.empty());
  ScheduleParams q = view_schedule(views[0]);
  EXPECT_TRUE(validate(views[0], q, limits).empty());
  q.relayout = 0;
  EXPECT_TRUE(has(views[0], q, "relayout = 0 on a relayout view"));
  const std::vector<ImplicitGemm> simt = views_of(conv, "simt_fp16_fp32", 1);
  ASSERT_FALSE(simt.empty());
  ScheduleParams w = view_schedule(simt[0]);
  w.window = 1;
  EXPECT_TRUE(has(simt[0], w, "window = 1 with relayout = 1"));
  // The user's GEMM with relayout = 1 validates and emits through its view, like the view itself.
  ImplicitGemm plain = views[0];
  {
    const MatchReport cr = match_compute(conv, {hw}, Enumeration::kAll);
    for (const Match& m : cr.matches)
      for (const Mapping& map : m.mappings)
        if (m.layout == views[0].layout && m.roles.a_input == views[0].a_input && map.id == views[0].mapping_id)
          plain = make_implicit_gemm(conv, hw, m, map);
  }
  ASSERT_FALSE(plain.relayouted());
  const ScheduleParams vp = view_schedule(views[0]);
  EXPECT_TRUE(validate(plain, vp, limits).empty());
  EXPECT_EQ(emit_kernel(plain, vp).code, emit_kernel(views[0], vp).code);
}

TEST(Relayout, SearchSpaceHasTwinArms) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const Compute conv = op("conv2d", {"N=2", "C=64", "H=15", "W=15", "K=96", "pad=1"});
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};  // outlives the spaces
  SearchSpace space(conv, hws, Enumeration::kAmos, limits, 90);
  int twins = 0;
  for (int i = 0; i < static_cast<int>(space.entries().size()); ++i) {
    const SpaceEntry& e = space.entries()[i];
    EXPECT_EQ(e.defaults.relayout, e.gemm.relayout_knob);
    EXPECT_EQ(e.choices.values_of("a_regs"), std::vector<int>{0}) << "a_regs: wgmma only";
    EXPECT_EQ(e.choices.values_of("relayout"), std::vector<int>{e.defaults.relayout});
    EXPECT_EQ(e.choices.values_of("cluster"), (std::vector<int>{0, 1}))
        << "mma_sync on sm_90 sums splits by the reduce kernel or a cluster";
    if (!e.gemm.relayouted()) continue;
    ++twins;
    EXPECT_NE(e.label.find(" relayout"), std::string::npos) << e.label;
    // A record finds its arm again (the twin for relayout = 1, the plain arm for 0).
    EXPECT_EQ(space.find(space.ref(i, e.defaults)), i);
    ScheduleParams plain = e.defaults;
    plain.relayout = 0;
    const int j = space.find(space.ref(i, plain));
    ASSERT_GE(j, 0);
    EXPECT_FALSE(space.entries()[j].gemm.relayouted());
  }
  EXPECT_GT(twins, 0);
  // A first layer has both twins; a record of relayout = 2 finds the 8-byte one.
  const Compute first = op("conv2d_nhwc", {"N=2", "C=3", "H=32", "W=30", "K=64", "R=7", "S=7", "stride=2", "pad=3"});
  SearchSpace both(first, hws, Enumeration::kAmos, limits, 90);
  std::set<int> knobs;
  for (int i = 0; i < static_cast<int>(both.entries().size()); ++i) {
    const SpaceEntry& e = both.entries()[i];
    EXPECT_EQ(e.defaults.relayout, e.gemm.relayout_knob);
    knobs.insert(e.gemm.relayout_knob);
    EXPECT_EQ(both.find(both.ref(i, e.defaults)), i);
    if (e.gemm.relayout_knob == 2) EXPECT_NE(e.label.find(" relayout (8-byte)"), std::string::npos) << e.label;
  }
  EXPECT_EQ(knobs, (std::set<int>{0, 1, 2}));
  const Compute nhwc = op("conv2d_nhwc", {"N=2", "C=64", "H=15", "W=15", "K=96", "pad=1"});
  SearchSpace plain(nhwc, hws, Enumeration::kAmos, limits, 90);
  for (const SpaceEntry& e : plain.entries()) EXPECT_FALSE(e.gemm.relayouted()) << e.label;
}

TEST(Relayout, ScheduleAndLaunchFieldsRoundTrip) {
  ScheduleParams p;
  p.relayout = 1;
  EXPECT_EQ(schedule_from_json(to_json(p)).relayout, 1);
  EXPECT_EQ(schedule_from_json(nlohmann::json::object()).relayout, 0) << "records without the key read in place";
  KernelSource k;
  k.name = "main";
  k.relayout_name = "main_prologue";
  k.relayout_blocks = 77;
  k.relayout_threads = 256;
  k.relayout_offset = {-1, 4096};
  k.workspace_bytes = 8192;
  k.grid = {10, 2, 1};
  k.threads = 128;
  const MeasureRequest back = request_from_json(to_json(MeasureRequest::for_kernel(op("gemm", {}), k, "x.cubin", 0, 1)));
  // The prologue copies the operands into the workspace, then the main kernel, its dependent,
  // reads A where it is and B's copy 4096 bytes into the workspace.
  EXPECT_EQ(back.launch.kernels, (std::vector<std::string>{"main_prologue", "main"}));
  const tmap_launch_plan& plan = back.launch.plan;
  ASSERT_EQ(plan.num_steps, 2);
  EXPECT_EQ(plan.workspace_bytes, 8192);
  EXPECT_EQ(plan.steps[0].grid[0], 77);
  EXPECT_EQ(plan.steps[0].threads, 256);
  EXPECT_FALSE(plan.steps[0].dependent);
  EXPECT_TRUE(plan.steps[1].dependent);
  EXPECT_EQ(plan.steps[1].args[0].slot, kSlotA);
  EXPECT_EQ(plan.steps[1].args[1].slot, kSlotWorkspace);
  EXPECT_EQ(plan.steps[1].args[1].offset, 4096);
}

/// Every family's view kernels for NCHW / NCW / NCDHW convolutions with padding, strides and odd
/// extents, at several dtypes: the launch fields, then NVRTC for sm_80 and sm_90 (wgmma: sm_90).
TEST(Relayout, EveryFamilysViewKernelsCompile) {
  struct Job {
    std::string label;
    KernelSource k;
    bool sm80;
  };
  std::vector<Job> jobs;
  const std::vector<std::pair<std::string, std::vector<std::string>>> convs = {
      {"conv2d", {"N=2", "C=24", "H=11", "W=13", "K=40", "pad=1"}},
      {"conv2d", {"N=2", "C=16", "H=15", "W=15", "K=32", "stride=2", "pad=1"}},
      {"conv1d", {"N=3", "C=40", "W=37", "K=48", "S=3", "stride=2", "pad=1"}},
      {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=7", "K=32", "pad=1"}},
      // Whole 128-byte lines of channels: the views' inputs are also read in TMA im2col boxes
      // (rank-3 and rank-5 maps) where the schedule takes a producer.
      {"conv1d", {"N=3", "C=64", "W=45", "K=48", "S=5", "stride=2", "pad=2"}},
      {"conv3d", {"N=2", "C=64", "D=4", "H=6", "W=7", "K=32", "pad=1"}},
      // Three channels padded to a whole vector, in both layouts (the sets' [1] and [4] label them).
      {"conv2d", {"N=2", "C=3", "H=20", "W=18", "K=32", "R=7", "S=7", "stride=2", "pad=3"}},
      {"conv2d_nhwc", {"N=2", "C=3", "H=20", "W=18", "K=32", "R=7", "S=7", "stride=2", "pad=3"}}};
  auto add = [&](const Compute& c, const std::string& hw, const std::string& label, std::size_t max, int knob) {
    const auto views = schedulable_views(c, hw, max, 90, knob);
    ASSERT_FALSE(views.empty()) << label << " " << hw << ": no view offered with a valid schedule";
    for (const auto& [g, p] : views) {
      KernelSource k = emit_kernel(g, p);
      EXPECT_EQ(k.relayout_name, k.name + "_prologue");
      EXPECT_GT(k.relayout_blocks, 0);
      std::int64_t end = 0;
      for (int which = 0; which < 2; ++which) {
        if (!g.relayout[which].active) {
          EXPECT_EQ(k.relayout_offset[which], -1);
          continue;
        }
        EXPECT_EQ(k.relayout_offset[which] % 256, 0);
        EXPECT_GE(k.relayout_offset[which], end);
        end = k.relayout_offset[which] + g.relayout[which].copy_elements() * g.relayout[which].bytes;
      }
      EXPECT_GE(k.workspace_bytes, end);
      EXPECT_NE(k.code.find("griddepcontrol.wait"), std::string::npos) << "the main kernel waits for the copies";
      jobs.push_back({label + " " + hw + " " + g.layout + " map " + std::to_string(g.mapping_id), k,
                      hw.rfind("wgmma", 0) != 0});
    }
  };
  for (const auto& [name, sets] : convs) {
    const Compute c = op(name, sets);
    for (const std::string hw : {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "wgmma_fp16_fp32", "simt_fp16_fp32"}) {
      add(c, hw, name + " " + sets[1] + " " + sets[4], 2, 1);
      if (sets[1] == "C=3") add(c, hw, name + " " + sets[1] + " " + sets[4] + " 8-byte", 2, 2);
    }
  }
  // Other element sizes: bf16 (2 bytes), tf32 (4) and int8 (1) copies.
  for (const auto& [hw, in_t, out_t] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"mma_sync_bf16_fp32", "bfloat16", "float32"},
           {"mma_sync_tf32_fp32", "float32", "float32"},
           {"mma_sync_int8_int32", "int8", "int32"},
           {"wgmma_int8_int32", "int8", "int32"}})
  {
    add(typed_op("conv2d", in_t, out_t, {"N=2", "C=32", "H=9", "W=11", "K=64", "pad=1"}), hw, "conv2d " + in_t, 1, 1);
    // Three channels padded to a whole vector of the type: 4 tf32, 16 int8 (relayout_pad_rows);
    // int8 also to 8 (relayout = 2, 8-byte vectors).
    if (hw.rfind("mma_sync", 0) == 0) {
      const Compute c = typed_op("conv2d", in_t, out_t, {"N=2", "C=3", "H=12", "W=12", "K=32", "pad=1"});
      add(c, hw, "conv2d C=3 " + in_t, 1, 1);
      if (in_t == "int8") add(c, hw, "conv2d C=3 8-byte " + in_t, 1, 2);
    }
  }
  std::vector<std::string> failures;
  for (int cc : {80, 90}) {
    NvrtcCompiler compiler(cc);
    std::vector<CompileJob> sources;
    std::vector<const Job*> which;
    for (const Job& j : jobs)
      if (cc == 90 || j.sm80) sources.push_back({j.k.name, j.k.code}), which.push_back(&j);
    for (const auto& [i, r] : testing::compile_sweep(compiler, sources))
      if (!r.ok) failures.push_back(which[i]->label + " sm_" + std::to_string(cc) + ":\n" + r.log);
  }
  EXPECT_GE(jobs.size(), 20u);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
}

// ---- On the GPU --------------------------------------------------------------------------

TEST(Gpu, RelayoutPrologue) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  const int cc = testing::device_cc();
  const DeviceLimits limits = DeviceLimits::for_arch(cc);
  std::uint64_t seed = 4100;
  const std::vector<std::pair<std::string, std::vector<std::string>>> convs = {
      {"conv2d", {"N=2", "C=24", "H=11", "W=13", "K=40", "pad=1"}},
      {"conv2d", {"N=2", "C=16", "H=15", "W=15", "K=32", "stride=2", "pad=1"}},
      {"conv2d", {"N=3", "C=64", "H=7", "W=7", "K=72", "pad=1"}},
      {"conv1d", {"N=3", "C=40", "W=37", "K=48", "S=3", "stride=2", "pad=1"}},
      {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=7", "K=32", "pad=1"}},
      // Whole 128-byte lines of channels: the views' inputs are also read in TMA im2col boxes
      // (rank-3 and rank-5 maps) where the schedule takes a producer.
      {"conv1d", {"N=3", "C=64", "W=45", "K=48", "S=5", "stride=2", "pad=2"}},
      {"conv3d", {"N=2", "C=64", "D=4", "H=6", "W=7", "K=32", "pad=1"}},
      // The prologue's register transposes (at least 128 blocks): 8-element vectors, 2 x 2 blocks
      // per image, the last ones partial (72 channels, 320 pixels); 4-element vectors (60 pixels).
      {"conv2d", {"N=32", "C=72", "H=16", "W=20", "K=40", "pad=1"}},
      {"conv2d", {"N=128", "C=20", "H=6", "W=10", "K=24", "stride=2", "pad=1"}},
      // Rows shorter than 32 of more than 256 channels: blocks of 256 rows and a partial one (64),
      // for the 5 x 5 input and for the filters.
      {"conv2d", {"N=4", "C=320", "H=5", "W=5", "K=32", "pad=1"}},
      // Three channels padded with zeros to 8 (and to 4) in both copies (a first layer), in both
      // layouts.
      {"conv2d", {"N=2", "C=3", "H=20", "W=18", "K=32", "R=7", "S=7", "stride=2", "pad=3"}},
      {"conv2d_nhwc", {"N=2", "C=3", "H=20", "W=18", "K=32", "R=7", "S=7", "stride=2", "pad=3"}}};
  std::vector<std::string> hws = {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "simt_fp16_fp32"};
  if (cc == 90) hws.push_back("wgmma_fp16_fp32");
  int runs = 0;
  for (const auto& [name, sets] : convs) {
    const Compute c = op(name, sets);
    std::vector<testing::GpuCase> cases;
    std::vector<std::pair<ImplicitGemm, ScheduleParams>> views;
    for (const std::string& hw : hws) {
      for (auto& v : schedulable_views(c, hw, 2, cc)) views.push_back(std::move(v));
      // A first layer's channels padded to 8-byte vectors too (relayout = 2).
      if (sets[1] == "C=3")
        for (auto& v : schedulable_views(c, hw, 2, cc, 2)) views.push_back(std::move(v));
    }
    for (const auto& [g, p] : views) {
      const std::string label = name + " " + sets[1] + " " + sets[4] + " " + g.hw->name + " " + g.layout + " map " +
                                std::to_string(g.mapping_id) + " relayout " + std::to_string(p.relayout);
      cases.push_back({label, g, p, 1e-2});
      ScheduleParams split = p;
      split.split_k = 2;
      if (validate(g, split, limits).empty()) cases.push_back({label + " split 2", g, split, 1e-2});
      split.cluster = 1;  // summed in a cluster after a prologue (sm_90)
      if (validate(g, split, limits).empty()) cases.push_back({label + " split 2 cluster", g, split, 1e-2});
      ScheduleParams tma = p;
      tma.producer = 1;
      if (validate(g, tma, limits).empty()) cases.push_back({label + " tma", g, tma, 1e-2});
    }
    runs += static_cast<int>(cases.size());
    testing::run_cases(c, cases, seed++);
  }
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"mma_sync_tf32_fp32", "float32", "float32", 1e-3}, {"mma_sync_int8_int32", "int8", "int32", 0.0}}) {
    // 99 pixels (32 x 32 tiles in shared memory), then 128 pixels of 128 images (a register
    // transpose of 16 int8 or 4 tf32 elements, one block per image), then 3 channels padded to
    // 16 int8 or 4 tf32 ones.
    for (const auto& [n, ch, h, w] : std::vector<std::array<std::string, 4>>{
             {"N=2", "C=32", "H=9", "W=11"}, {"N=128", "C=32", "H=8", "W=16"}, {"N=2", "C=3", "H=12", "W=12"}}) {
      const Compute c = typed_op("conv2d", in_t, out_t, {n, ch, h, w, "K=64", "pad=1"});
      std::vector<testing::GpuCase> cases;
      for (const auto& [g, p] : schedulable_views(c, hw, 1, cc))
        cases.push_back({hw + " conv2d " + ch + " " + w + " relayout", g, p, tol});
      runs += static_cast<int>(cases.size());
      testing::run_cases(c, cases, seed++);
    }
  }
  EXPECT_GE(runs, 20);
}

// The channels-last copies of NCW, NCHW and NCDHW inputs read by wgmma's TMA producer in im2col
// boxes (rank-3, 4 and 5 maps; stride, dilation, padding), on the first mapping of each view that
// takes the producer, against the reference.
TEST(Gpu, WgmmaIm2colViews) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (testing::device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90";
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const HwAbstraction& hw = find_hw(shipped(), "wgmma_fp16_fp32");
  std::uint64_t seed = 4700;
  int runs = 0;
  for (const auto& [name, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv1d", {"N=3", "C=64", "W=45", "K=48", "S=5", "stride=2", "pad=2"}},
           {"conv1d", {"N=2", "C=128", "W=40", "K=64", "S=3", "dil=3", "pad=3"}},
           {"conv2d", {"N=2", "C=64", "H=15", "W=13", "K=96", "stride=2", "pad=1"}},
           {"conv3d", {"N=2", "C=64", "D=4", "H=6", "W=7", "K=32", "pad=1"}}}) {
    const Compute c = op(name, sets);
    std::vector<testing::GpuCase> cases;
    const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    for (const Match& m : r.matches) {
      for (const Mapping& map : m.mappings) {
        RelayoutView v = relayout_view(make_implicit_gemm(c, hw, m, map));
        if (!v.why_not.empty()) continue;
        ScheduleParams p = default_schedule(v.gemm, limits);
        p.relayout = 1;
        p.producer = 1;
        if (!validate(v.gemm, p, limits).empty()) continue;
        const std::string label = name + " " + sets[1] + " " + sets.back() + " " + m.layout + " im2col";
        cases.push_back({label, v.gemm, p, 1e-2});
        ScheduleParams split = p;
        split.split_k = 2;
        if (validate(v.gemm, split, limits).empty()) cases.push_back({label + " split 2", v.gemm, split, 1e-2});
        break;
      }
      if (!cases.empty()) break;
    }
    EXPECT_FALSE(cases.empty()) << name << ": no view takes an im2col producer";
    runs += static_cast<int>(cases.size());
    testing::run_cases(c, cases, seed++);
  }
  EXPECT_GE(runs, 4);
}

}  // namespace
}  // namespace tmap
