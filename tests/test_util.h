// Small helpers shared by the table-driven tests.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tmap/codegen/validate.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/gemm/implicit_gemm.h"
#include "tmap/hw/hw_abstraction.h"
#include "tmap/match/matcher.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/runtime/device.h"
#include "tmap/schedule/schedule.h"
#include "tmap/support/diagnostic.h"

namespace tmap::testing {

/// Whether the whole suite runs (TMAP_TEST_FULL=1: `tools/test.sh --full`, which CI runs). The
/// NVRTC sweeps then compile every kernel for every architecture they name; otherwise each
/// kernel is compiled for one of them, in turn, so that every kernel still compiles once and
/// each architecture sees its share.
inline bool full_suite() {
  const char* v = std::getenv("TMAP_TEST_FULL");
  return v != nullptr && std::string(v) == "1";
}
/// One kernel in how many of a sweep's that NVRTC compiles (TMAP_TEST_SAMPLE, default 1). The
/// sanitizer build's run (`tools/test.sh --full`) sets 8: it generates every kernel, which is
/// tmap's code that the sanitizers watch, and compiles a sample to keep NVRTC's path in view;
/// NVRTC, whose allocations AddressSanitizer intercepts, runs five times slower there, and the
/// release build's run of the same suite has compiled every kernel.
inline std::size_t sweep_sample() {
  const char* v = std::getenv("TMAP_TEST_SAMPLE");
  const long n = v != nullptr ? std::strtol(v, nullptr, 10) : 1;
  return n > 1 ? static_cast<std::size_t>(n) : 1;
}

/// The compile cache of the tuner's tests (TMAP_TEST_COMPILE_CACHE; none when unset).
/// `tools/test.sh --full` empties one before the release build's suite, whose tunes compile every
/// candidate with NVRTC and fill it; the sanitizer build's suite then reads their cubins back
/// (the same sources), which leaves the tuner's own code to the sanitizers and NVRTC's run under
/// them to the sampled sweeps.
inline std::string test_compile_cache() {
  const char* v = std::getenv("TMAP_TEST_COMPILE_CACHE");
  return v != nullptr ? v : "";
}

/// Whether a sweep compiles its kernel number `i` for architecture number `a` of the `n` it names.
inline bool sweep_compiles(std::size_t i, std::size_t a, std::size_t n) {
  if (full_suite()) return true;
  return i % n == a && (i / n) % sweep_sample() == 0;
}

/// Compiles the jobs of a sweep that sweep_compiles() gives architecture number `a` of `n`, on all
/// cores; returns each compiled job's index in `jobs` with its result.
inline std::vector<std::pair<std::size_t, CompileResult>> compile_sweep(NvrtcCompiler& compiler,
                                                                        const std::vector<CompileJob>& jobs,
                                                                        std::size_t a = 0, std::size_t n = 1) {
  std::vector<CompileJob> share;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < jobs.size(); ++i)
    if (sweep_compiles(i, a, n)) share.push_back(jobs[i]), index.push_back(i);
  std::vector<CompileResult> results = compile_parallel(compiler, share);
  std::vector<std::pair<std::size_t, CompileResult>> out;
  for (std::size_t k = 0; k < results.size(); ++k) out.emplace_back(index[k], std::move(results[k]));
  return out;
}

/// What validate() says of schedule p for g: each issue's detail on a line of its own, "" when
/// the schedule is valid.
inline std::string validation_text(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits) {
  std::string said;
  for (const ScheduleIssue& i : validate(g, p, limits)) said += i.detail + "\n";
  return said;
}

/// Runs f and returns the UserError's message, or "<no error>" when none was thrown.
template <typename F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

/// Parses a compute definition given as JSON text, as if read from "test.json".
inline ComputeDef parse_def(const std::string& json) {
  SourceText src("test.json", json);
  return parse_compute_json(src, "test");
}

inline Compute build_json(const std::string& json, const std::vector<std::string>& sets = {}) {
  return build_compute(parse_def(json), parse_param_overrides(sets));
}

/// A built-in op whose output is stored as `out_dtype` (sums in the op's own dtype), as
/// `--out-dtype` does.
inline Compute narrowed_op(const std::string& op, const std::string& out_dtype, const std::vector<std::string>& sets) {
  ComputeDef def = builtin_op(op);
  set_output_dtype(def, *parse_dtype(out_dtype), SourceLoc::whole("--out-dtype"));
  return build_compute(def, parse_param_overrides(sets));
}

/// Built-in op `op` stored as `out_dtype` (summed in its own dtype) with `epilogue` appended, as
/// `--out-dtype` and `--epilogue` do.
inline Compute fused_op(const std::string& op, const std::string& out_dtype, const std::string& epilogue,
                        const std::vector<std::string>& sets) {
  ComputeDef def = builtin_op(op);
  set_output_dtype(def, *parse_dtype(out_dtype), SourceLoc::whole("--out-dtype"));
  SourceText text("--epilogue", epilogue);
  set_epilogue(def, epilogue, locator_for(text), SourceLoc::whole("--epilogue"));
  return build_compute(def, parse_param_overrides(sets));
}

/// A compute of a built-in op with the inputs' dtype replaced and its output stored as `out_t`,
/// summed in the op's own accumulation dtype (as --out-dtype does).
inline Compute stored_as_op(const std::string& op, const std::string& in_t, const std::string& out_t,
                            const std::vector<std::string>& sets) {
  SourceText src("<" + op + ">", builtin_op_source(op));
  ComputeDef def = parse_compute_json(src, op);
  for (auto& t : def.tensors)
    if (t.name != "C" && t.name != "Out") t.dtype = *parse_dtype(in_t);
  set_output_dtype(def, *parse_dtype(out_t), SourceLoc::whole("--out-dtype"));
  return build_compute(def, parse_param_overrides(sets));
}

/// A compute of a built-in op with the inputs' and output's dtypes replaced (the output is "C" or
/// "Out").
inline Compute typed_op(const std::string& op, const std::string& in_t, const std::string& out_t,
                        const std::vector<std::string>& sets) {
  SourceText src("<" + op + ">", builtin_op_source(op));
  ComputeDef def = parse_compute_json(src, op);
  for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" || t.name == "Out" ? out_t : in_t);
  return build_compute(def, parse_param_overrides(sets));
}

/// Stride-2 convolutions in NCHW / NCW / NCDHW whose input rows are whole aligned vectors: W = 16
/// and 8 (8 halves a load, groups of 4), W = 12 (4 a load, groups of 2), a 1x1 layer without
/// padding and 3x3 / 3-tap layers with it.
inline std::vector<std::pair<std::string, std::vector<std::string>>> strided_conv_shapes() {
  return {{"conv2d", {"N=2", "C=32", "H=12", "W=16", "K=48", "stride=2"}},
          {"conv2d", {"N=2", "C=16", "H=12", "W=12", "K=32", "R=1", "S=1", "pad=0", "stride=2"}},
          {"conv1d", {"N=2", "C=40", "W=64", "K=48", "S=3", "pad=1", "stride=2"}},
          {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=8", "K=32", "stride=2"}}};
}

/// The abstractions shipped in the source tree's hw_abstractions/, loaded once.
inline const std::vector<HwAbstraction>& shipped() {
  static const std::vector<HwAbstraction> all = load_hw_directory(std::string(TMAP_SOURCE_DIR) + "/hw_abstractions");
  return all;
}

/// Whether a GPU is usable here (GPU tests skip without one).
inline bool have_gpu() { return !query_runtime().devices.empty(); }

/// conv2d_nhwc parameters whose inputs wgmma reads in TMA im2col boxes (whole 128-byte lines of
/// channels): padding, stride 2, dilation 2, 1x1 stride 2, 5x5; M tails that wrap into the next image.
inline std::vector<std::vector<std::string>> im2col_conv_shapes() {
  return {{"N=3", "C=64", "H=9", "W=11", "K=40", "pad=1"},
          {"N=3", "C=128", "H=9", "W=11", "K=64", "stride=2", "pad=1"},
          {"N=2", "C=64", "H=12", "W=10", "K=72", "dil=2", "pad=2"},
          {"N=2", "C=64", "H=14", "W=14", "K=128", "R=1", "S=1", "stride=2", "pad=0"},
          {"N=2", "C=192", "H=7", "W=7", "K=64", "R=5", "S=5", "pad=2"}};
}

/// Shifted-vector schedules of wgmma's thread-gathered ring (producer 0) for the layouts of `c`
/// (written operand order) that store an operand along the output's width: each shifted operand
/// read in the widest vectors its contiguity allows, then variants of the ring where valid (3
/// and 5 stages, split-K, A from registers, two consumers).
inline std::vector<std::pair<std::string, std::pair<ImplicitGemm, ScheduleParams>>> wgmma_shifted_schedules(
    const Compute& c, const HwAbstraction& hw) {
  const std::vector<std::pair<std::string, std::function<void(ScheduleParams&)>>> edits = {
      {"stages 3", [](ScheduleParams& p) { p.stages = 3; }},
      {"stages 5", [](ScheduleParams& p) { p.stages = 5; }},
      {"split 2", [](ScheduleParams& p) { p.split_k = 2; }},
      {"a_regs", [](ScheduleParams& p) { p.a_regs = 1; }},
      {"2 consumers", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; }}};
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<std::pair<std::string, std::pair<ImplicitGemm, ScheduleParams>>> out;
  const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  for (const Match& m : r.matches) {
    if (m.roles.a_input != r.matches.front().roles.a_input) continue;
    ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
    ScheduleParams d = default_schedule(g, limits);
    d.producer = 0;
    d.vec_a = max_vector_width(g, 0);
    d.vec_b = max_vector_width(g, 1);
    if (!copies_shifted(g, d, 0) && !copies_shifted(g, d, 1)) continue;
    if (!validate(g, d, limits).empty()) continue;
    const std::string label = c.name + " " + hw.name + " " + m.layout;
    out.push_back({label + " shifted", {g, d}});
    for (const auto& [name, edit] : edits) {
      ScheduleParams p = d;
      edit(p);
      if (validate(g, p, limits).empty()) out.push_back({label + " shifted " + name, {g, p}});
    }
  }
  return out;
}

}  // namespace tmap::testing
