// tmap_emit_corpus: the generated CUDA source of many schedules, drawn from the search spaces of a
// fixed set of workloads that reach every family and main loop (every mapping the tuner
// searches), written into one file.
//
// An emitter refactor that should change no kernel is checked by running it before and after
// and comparing the two files (`cmp`); the same seed draws the same schedules as long as the
// search spaces are unchanged. No GPU is needed: nothing is compiled.
//
//   build/bin/tmap_emit_corpus OUT [DRAWS]   (DRAWS per arm, at most 48 arms a workload; default 40)

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tmap/codegen/emitter.h"
#include "tmap/codegen/validate.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/frontend/parser.h"
#include "tmap/hw/hw_abstraction.h"
#include "tmap/support/diagnostic.h"
#include "tmap/tune/search_space.h"

namespace {

using namespace tmap;

/// The most arms of one workload's space whose schedules are drawn.
constexpr int kMaxArms = 48;

struct Workload {
  const char* name;
  const char* op;
  const char* inputs;  ///< The inputs' dtype ("" keeps the op's).
  const char* output;  ///< The output's dtype.
  const char* epilogue;
  std::vector<std::string> sets;
};

/// Fixed and dynamic GEMMs in every input dtype a family takes, fused epilogues, and
/// convolutions in both layouts (im2col and relayout views, depthwise and grouped ones).
const std::vector<Workload>& workloads() {
  static const std::vector<Workload> w = {
      {"gemm_f32_out", "gemm", "", "float32", "", {"M=256", "N=256", "K=256"}},
      {"gemm_nt_bf16", "gemm_nt", "bfloat16", "bfloat16", "", {"M=200", "N=1024", "K=512"}},
      {"gemm_nt_range", "gemm_nt", "bfloat16", "bfloat16", "", {"M=1..256", "N=1024", "K=512"}},
      {"gemm_tn_fp16", "gemm_tn", "", "float16", "", {"M=192", "N=320", "K=96"}},
      {"gemm_nt_e4m3", "gemm_nt", "e4m3", "bfloat16", "", {"M=256", "N=512", "K=512"}},
      {"gemm_int8", "gemm_nt", "int8", "int32", "", {"M=128", "N=256", "K=256"}},
      {"gemm_bias_gelu", "gemm_nt", "", "float16", "Y[m, n] = gelu(C[m, n] + bias[n])", {"M=512", "N=256", "K=256"}},
      {"conv_nhwc_fused", "conv2d_nhwc", "", "float16",
       "Y[n, p, q, k] = relu(Out[n, p, q, k] * scale[k] + bias[k] + R[n, p, q, k])",
       {"N=2", "C=64", "H=14", "W=14", "K=128"}},
      {"conv_nhwc_c3", "conv2d_nhwc", "", "float16", "", {"N=2", "C=3", "H=32", "W=32", "K=64", "R=7", "S=7",
                                                          "stride=2", "pad=3"}},
      {"conv_nchw", "conv2d", "", "float16", "", {"N=2", "C=64", "H=14", "W=14", "K=64"}},
      {"conv_batch_range", "conv2d_nhwc", "", "float16", "", {"N=1..8", "C=64", "H=14", "W=14", "K=64"}},
      {"conv_grouped", "conv2d_nhwc", "", "float16", "", {"N=2", "C=64", "H=14", "W=14", "K=64", "groups=8"}},
      {"conv1d", "conv1d", "", "float16", "", {"N=2", "C=64", "W=128", "K=64"}},
      {"depthwise", "depthwise_conv2d", "", "float16", "", {"N=2", "C=64", "H=28", "W=28"}},
  };
  return w;
}

Compute build(const Workload& w) {
  ComputeDef def = builtin_op(w.op);
  set_dtypes(def, w.inputs, w.output, "--dtype", "--out-dtype");
  if (*w.epilogue) {
    SourceText text("--epilogue", w.epilogue);
    set_epilogue(def, w.epilogue, locator_for(text), SourceLoc::whole("--epilogue"));
  }
  return build_compute(def, parse_param_overrides(w.sets));
}

/// The arms whose schedules are drawn: the first of each kind (abstraction, layout, relayout,
/// window staging, group pack), then others evenly spaced up to kMaxArms in all (a
/// convolution's mappings make hundreds of arms, a grouped one's packs thousands).
std::vector<int> chosen_arms(const SearchSpace& space) {
  const std::vector<SpaceEntry>& arms = space.entries();
  std::set<int> chosen;
  std::set<std::string> kinds;
  for (int e = 0; e < static_cast<int>(arms.size()); ++e) {
    const ScheduleParams& d = arms[e].defaults;
    const std::string kind = arms[e].hw->name + " " + arms[e].match->layout + " " + std::to_string(d.relayout) + " " +
                             std::to_string(d.window) + " " + std::to_string(arms[e].compute->group_pack);
    if (kinds.insert(kind).second) chosen.insert(e);
  }
  const int size = static_cast<int>(arms.size()), stride = std::max(1, size / kMaxArms);
  for (int e = 0; e < size && static_cast<int>(chosen.size()) < kMaxArms; e += stride) chosen.insert(e);
  return {chosen.begin(), chosen.end()};
}

/// A draw, or every other time the same draw made persistent (producer 2 or 3, whole tiles,
/// each way of storing them), where that is valid: persistent kernels are a small share of the
/// space's draws.
bool next_schedule(const SearchSpace& space, int entry, int i, std::mt19937_64& rng, ScheduleParams& p) {
  p = space.sample(entry, rng);
  if (i % 2 == 0) return true;
  p.producer = 2 + (i / 2) % 2;
  p.split_k = 1;
  p.bulk_store = (i / 4) % 3;
  if (p.producer == 3) p.block_m = p.warp_m, p.block_n = p.warp_n;
  return space.valid(entry, p);
}

int write_corpus(const char* path, int draws) {
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    std::fprintf(stderr, "tmap_emit_corpus: cannot write %s\n", path);
    return 1;
  }
  const std::vector<HwAbstraction> hws = load_hw_abstractions();
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  long kernels = 0;
  for (const Workload& w : workloads()) {
    const Compute c = build(w);
    const SearchSpace space(c, hws, Enumeration::kAll, limits, 90);
    std::mt19937_64 rng(7);
    for (int e : chosen_arms(space))
      for (int i = 0; i < draws; ++i) {
        ScheduleParams p;
        if (!next_schedule(space, e, i, rng, p)) continue;
        const SpaceEntry& arm = space.entries()[e];
        out << "==== " << w.name << " arm " << e << " " << arm.hw->name << " " << to_json(p).dump() << "\n"
            << emit_kernel(arm.gemm, p).code;
        ++kernels;
      }
  }
  std::fprintf(stderr, "tmap_emit_corpus: %ld kernels of %zu workloads in %s\n", kernels, workloads().size(), path);
  return out ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // An option where OUT belongs (--help) gets the usage, not a corpus written to a file of its name.
  const bool help = argc >= 2 && argv[1][0] == '-';
  if (argc < 2 || argc > 3 || help) {
    std::fprintf(help ? stdout : stderr, "usage: tmap_emit_corpus OUT [DRAWS]  (DRAWS schedules per arm, default 40)\n");
    return help && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") ? 0 : 2;
  }
  const int draws = argc == 3 ? std::atoi(argv[2]) : 40;
  if (draws < 1) {
    std::fprintf(stderr, "tmap_emit_corpus: DRAWS must be a positive number, not '%s'\n", argv[2]);
    return 2;
  }
  try {
    return write_corpus(argv[1], draws);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tmap_emit_corpus: %s\n", e.what());
    return 1;
  }
}
