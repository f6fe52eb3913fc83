// tmap_bench's cuDNN baselines: the strongest bare convolution (every legacy algorithm and cuDNN
// 9's engines), optionally followed by a framework's unfused elementwise kernels, and cuDNN's
// fused calls for a convolution with an epilogue.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "epilogue_forms.h"

namespace bench {

/// Every cuDNN forward algorithm and the backend engines (fp16 in, fp32 accumulation, the
/// compute's output dtype out: fp16 is PSEUDO_HALF_CONFIG) in channels-first (NCHW/KCRS,
/// NCDHW/KCTRS) or channels-last layout. When that is not tmap's layout, cuDNN gets the same
/// values transposed, and its output is transposed back to be checked. With `post` (tmap's
/// layout only), each candidate is followed by it.
std::optional<Baseline> cudnn_baseline(const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                                       const std::vector<double>& tmap_out, const ConvShape& shape,
                                       bool channels_last, int graph_runs, const PostOps* post = nullptr);

/// cuDNN's fused calls for a convolution with an epilogue, in tmap's layout: the backend graph of
/// the convolution and the epilogue's pointwise operations (its heuristics' engine configs,
/// runtime-fused engines among them), and cudnnConvolutionBiasActivationForward where the
/// epilogue has its form. The fastest correct one; `note` says which could not run it and why.
std::optional<Baseline> cudnn_fused_baseline(const Compute& c, tmap::Workspace& ws, const EpilogueView& v,
                                             const std::vector<double>& ref, const std::vector<double>& tmap_out,
                                             const ConvShape& shape, int graph_runs, std::string& note);

}  // namespace bench
