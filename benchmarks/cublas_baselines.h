// tmap_bench's cuBLAS baselines: the strongest bare GEMM (cublasLt's heuristic candidates and
// cublasGemmEx), optionally followed by a framework's unfused elementwise kernels, and cuBLASLt's
// fused epilogues for a GEMM with an epilogue of their form.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "epilogue_forms.h"

namespace bench {

/// cublasLt's heuristic candidates and cublasGemmEx for gemm, gemm_nt, gemm_tn and gemm_tt
/// (cublasGemmStridedBatchedEx for batched_gemm and gemv) for C[M,N] = A[M,K] * B[K,N] (row-major, in the compute's dtypes: float16 and
/// bfloat16 and 8-bit floats summed in float32, float32 in tf32, int8 in int32): in cuBLAS's column-major terms
/// C^T = B^T A^T. With `post`, each candidate is followed by it. A std::runtime_error when cuBLAS
/// has no type for a dtype.
std::optional<Baseline> cublas_baseline(const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                                        const std::vector<double>& tmap_out, int graph_runs,
                                        const PostOps* post = nullptr);

/// cuBLASLt with the epilogue that computes `c`'s (BIAS, RELU(_BIAS), GELU(_BIAS), a residual as
/// C with beta 1): its heuristic candidates. Nothing, with `note`, when it has none.
std::optional<Baseline> cublaslt_fused_baseline(const Compute& c, tmap::Workspace& ws, const EpilogueView& v,
                                                const std::vector<double>& ref, const std::vector<double>& tmap_out,
                                                int graph_runs, std::string& note);

}  // namespace bench
