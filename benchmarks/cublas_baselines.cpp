// tmap_bench's cuBLAS baselines (cublas_baselines.h).
#include "cublas_baselines.h"

#include <cublasLt.h>
#include <memory>
#include <stdexcept>

namespace bench {

namespace {

/// The types of a GEMM as cuBLAS computes it: the operands', the output's, the sums' and
/// alpha's and beta's. float32 operands are multiplied in tf32, as tmap's Tensor Core kernels do;
/// 8-bit floats (cuBLASLt only, both operands K-major: gemm_nt) are summed in float32.
struct GemmTypes {
  cudaDataType_t in = CUDA_R_16F, out = CUDA_R_16F, scale = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};

GemmTypes gemm_types(const Compute& c) {
  const tmap::DType in = c.tensor_of(c.inputs[0]).dtype;
  if (c.tensor_of(c.inputs[1]).dtype != in) throw std::runtime_error("cuBLAS takes operands of one dtype");
  GemmTypes t;
  t.in = cuda_type(in);
  t.out = cuda_type(c.tensor_of(c.output).dtype);
  if (in == tmap::DType::kFloat32) t.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (in == tmap::DType::kInt8) t.compute = CUBLAS_COMPUTE_32I, t.scale = CUDA_R_32I;
  if (in == tmap::DType::kFloat64) t.compute = CUBLAS_COMPUTE_64F, t.scale = CUDA_R_64F;
  return t;
}

/// alpha and beta held as the scale type wants them.
class Scalars {
 public:
  Scalars(cudaDataType_t type, double alpha, double beta) : type_(type) {
    f_[0] = static_cast<float>(alpha), f_[1] = static_cast<float>(beta);
    i_[0] = static_cast<int>(alpha), i_[1] = static_cast<int>(beta);
    d_[0] = alpha, d_[1] = beta;
  }
  const void* alpha() const { return at(0); }
  const void* beta() const { return at(1); }

 private:
  const void* at(int i) const {
    if (type_ == CUDA_R_32I) return &i_[i];
    if (type_ == CUDA_R_64F) return &d_[i];
    return &f_[i];
  }
  cudaDataType_t type_;
  float f_[2];
  int i_[2];
  double d_[2];
};

/// How a GEMM op (the compute's name) stores A and B: gemm_tn / gemm_tt keep A as [K, M],
/// gemm_nt / gemm_tt keep B as [N, K]; `plain` for those four (batched_gemm and gemv are not).
struct GemmOp {
  bool plain = false, ta = false, tb = false;
};

GemmOp gemm_op(const std::string& opname) {
  GemmOp g;
  g.plain = opname == "gemm" || opname == "gemm_nt" || opname == "gemm_tn" || opname == "gemm_tt";
  g.ta = opname == "gemm_tn" || opname == "gemm_tt";
  g.tb = opname == "gemm_nt" || opname == "gemm_tt";
  return g;
}

/// A GEMM as cuBLASLt runs it: row-major C[M,N] = op(A) op(B) as column-major
/// C^T = op(B)^T op(A)^T, D = epilogue(alpha op(A) op(B) + beta C + bias).
struct LtGemm {
  int M = 0, N = 0, K = 0;
  bool ta = false, tb = false;  ///< A stored [K, M]; B stored [N, K].
  const void* A = nullptr;
  const void* B = nullptr;
  const void* C = nullptr;
  void* D = nullptr;
  GemmTypes types;
  double alpha = 1, beta = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  /// 8-bit float inputs: sums kept in the Tensor Cores' accumulator throughout (1), as tmap's
  /// kernels keep them, rather than promoted to float32 registers now and then (0).
  std::int8_t fast_accum = 0;
};

/// cublasLt's heuristic candidates for `g`, each offered to `s` as "`label` #i"; how many it found.
int lt_candidates(const LtGemm& g, void* scratch, std::size_t ws_bytes, const std::string& label, Search& s) {
  cublasLtHandle_t lt;
  cublas_ok(cublasLtCreate(&lt), "cublasLtCreate");
  std::unique_ptr<cublasLtContext, decltype(&cublasLtDestroy)> lt_owner(lt, &cublasLtDestroy);
  cublasLtMatmulDesc_t op;
  cublas_ok(cublasLtMatmulDescCreate(&op, g.types.compute, g.types.scale), "matmul desc");
  const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
  cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
  cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof g.epilogue), "epilogue");
  if (g.bias)
    cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias), "bias");
  if (g.fast_accum)
    cublas_ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &g.fast_accum, sizeof g.fast_accum),
              "fast accumulation");
  cublasLtMatrixLayout_t la, lb, lc;  // B^T (N x K), A^T (K x M), C^T (N x M), column-major
  const cudaDataType_t in = g.types.in;
  cublas_ok(g.tb ? cublasLtMatrixLayoutCreate(&la, in, g.K, g.N, g.K) : cublasLtMatrixLayoutCreate(&la, in, g.N, g.K, g.N),
            "layout");
  cublas_ok(g.ta ? cublasLtMatrixLayoutCreate(&lb, in, g.M, g.K, g.M) : cublasLtMatrixLayoutCreate(&lb, in, g.K, g.M, g.K),
            "layout");
  cublas_ok(cublasLtMatrixLayoutCreate(&lc, g.types.out, g.N, g.M, g.N), "layout");
  cublasLtMatmulPreference_t pref;
  cublas_ok(cublasLtMatmulPreferenceCreate(&pref), "preference");
  cublas_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                 sizeof ws_bytes),
            "preference");
  cublasLtMatmulHeuristicResult_t results[8];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, results, &found);
  const Scalars scalars(g.types.scale, g.alpha, g.beta);
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    s.consider(label + " #" + std::to_string(i), [&, i](void* stream) {
      return cublasLtMatmul(lt, op, scalars.alpha(), g.B, la, g.A, lb, scalars.beta(), g.C, lc, g.D, lc, &results[i].algo, scratch,
                            ws_bytes, static_cast<cudaStream_t>(stream)) == CUBLAS_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    });
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  return found;
}

}  // namespace

std::optional<Baseline> cublas_baseline(const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                                        const std::vector<double>& tmap_out, int graph_runs, const PostOps* post) {
  auto param = [&](const std::string& name) { return param_of(c, name); };
  // The op (c.name) says how A and B are stored (gemm_op); batched_gemm has BATCH such products,
  // gemv is N = 1.
  const std::string& opname = c.name;
  const GemmOp op = gemm_op(opname);
  const bool ta = op.ta, tb = op.tb;
  const int batch = opname == "batched_gemm" ? param("BATCH") : 1;
  const int M = param("M"), N = opname == "gemv" ? 1 : param("N"), K = param("K");
  const void* A = ws.device(c.inputs[0].tensor);
  const void* B = ws.device(c.inputs[1].tensor);
  const std::size_t out_elems = static_cast<std::size_t>(M) * N * batch;
  const GemmTypes types = gemm_types(c);
  const tmap::DType out_dtype = c.tensor_of(c.output).dtype;
  const std::size_t out_bytes = bytes_of(out_dtype, out_elems);
  Buffer out(out_bytes);
  const std::size_t ws_bytes = 32u << 20;
  Buffer scratch(ws_bytes);
  const Scalars scalars(types.scale, 1, 0);
  const void* alpha = scalars.alpha();
  const void* beta = scalars.beta();
  Search s{ref, tmap_out, graph_runs, out.p, out_bytes, [&] { return read_output(out.p, out_elems, out_dtype); }};
  s.post = post;
  auto consider = [&](const std::string& name, const std::function<int(void*)>& launch) { s.consider(name, launch); };

  cublasHandle_t blas;
  cublas_ok(cublasCreate(&blas), "cublasCreate");
  std::unique_ptr<cublasContext, decltype(&cublasDestroy)> blas_owner(blas, &cublasDestroy);
  cublas_ok(cublasSetWorkspace(blas, scratch.p, ws_bytes), "cublasSetWorkspace");
  // Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T.
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!op.plain) {  // batched_gemm, gemv
    consider("cublasGemmStridedBatchedEx", [&](void* stream) {
      cublasSetStream(blas, static_cast<cudaStream_t>(stream));
      return cublasGemmStridedBatchedEx(blas, opb, opa, N, M, K, alpha, B, types.in, tb ? K : N,
                                        static_cast<long long>(K) * N, A, types.in, ta ? M : K,
                                        static_cast<long long>(M) * K, beta, out.p, types.out, N,
                                        static_cast<long long>(M) * N, batch, types.compute,
                                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    });
    return s.result();
  }
  consider("cublasGemmEx", [&](void* stream) {
    cublasSetStream(blas, static_cast<cudaStream_t>(stream));
    return cublasGemmEx(blas, opb, opa, N, M, K, alpha, B, types.in, tb ? K : N, A, types.in, ta ? M : K, beta, out.p,
                        types.out, N, types.compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
               ? 0
               : static_cast<int>(cudaErrorUnknown);
  });

  LtGemm g;
  g.M = M, g.N = N, g.K = K, g.ta = ta, g.tb = tb, g.A = A, g.B = B, g.C = out.p, g.D = out.p, g.types = types;
  lt_candidates(g, scratch.p, ws_bytes, "cublasLt heuristic", s);
  if (tmap::dtype_is_float8(c.tensor_of(c.inputs[0]).dtype)) {
    g.fast_accum = 1;
    lt_candidates(g, scratch.p, ws_bytes, "cublasLt heuristic (fast accumulation)", s);
  }
  return s.result();
}

namespace {

/// The cuBLASLt epilogue of an activation, with or without a bias vector.
std::optional<cublasLtEpilogue_t> lt_epilogue(tmap::EpiOp act, bool bias) {
  switch (act) {
    case tmap::EpiOp::kAcc: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case tmap::EpiOp::kRelu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case tmap::EpiOp::kGeluTanh: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return std::nullopt;  // cuBLASLt's GELU is the tanh form; no erf GELU, SiLU, ...
  }
}

}  // namespace

std::optional<Baseline> cublaslt_fused_baseline(const Compute& c, tmap::Workspace& ws, const EpilogueView& v,
                                                const std::vector<double>& ref, const std::vector<double>& tmap_out,
                                                int graph_runs, std::string& note) {
  const GemmOp op = gemm_op(c.name);
  if (!op.plain) {
    note = "cuBLASLt epilogue: not for " + c.name;
    return std::nullopt;
  }
  const std::optional<BiasActForm> form = bias_act_form(c, v, 1);
  const std::optional<cublasLtEpilogue_t> epilogue = form ? lt_epilogue(form->act, form->bias != -1) : std::nullopt;
  const tmap::DType out_dtype = c.tensor_of(c.output).dtype;
  auto same_dtype = [&](int operand) { return operand == -1 || c.tensors[v.operands[operand].tensor].dtype == out_dtype; };
  if (!epilogue || form->scale != -1 || !same_dtype(form->bias) || !same_dtype(form->residual)) {
    note = "cuBLASLt epilogue: not act(alpha * A B + bias + residual) with relu or gelu_tanh";
    return std::nullopt;
  }
  const bool ta = op.ta, tb = op.tb;
  const int M = param_of(c, "M"), N = param_of(c, "N"), K = param_of(c, "K");
  const void* A = ws.device(c.inputs[0].tensor);
  const void* B = ws.device(c.inputs[1].tensor);
  const std::size_t out_elems = static_cast<std::size_t>(M) * N, out_bytes = bytes_of(out_dtype, out_elems);
  Buffer out(out_bytes);
  const std::size_t ws_bytes = 32u << 20;
  Buffer scratch(ws_bytes);
  Search s{ref, tmap_out, graph_runs, out.p, out_bytes, [&] { return read_output(out.p, out_elems, out_dtype); }};
  const void* C = form->residual == -1 ? out.p : ws.device(v.operands[form->residual].tensor);
  const void* bias = form->bias == -1 ? nullptr : ws.device(v.operands[form->bias].tensor);

  LtGemm g;
  g.M = M, g.N = N, g.K = K, g.ta = ta, g.tb = tb, g.A = A, g.B = B, g.C = C, g.D = out.p, g.types = gemm_types(c);
  g.alpha = form->alpha, g.beta = form->residual == -1 ? 0.0 : 1.0;
  g.epilogue = *epilogue, g.bias = bias;
  if (!lt_candidates(g, scratch.p, ws_bytes, "cublasLt fused epilogue", s)) note = "cuBLASLt epilogue: no heuristic result";
  return s.result();
}

}  // namespace bench
