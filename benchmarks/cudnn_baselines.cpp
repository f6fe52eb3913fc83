// tmap_bench's cuDNN baselines (cudnn_baselines.h).
#include "cudnn_baselines.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>

#include "tmap/ir/epilogue.h"

namespace bench {
namespace {

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

// The handle attributes are deprecated in cuDNN 9 but still what a plan is built against.
const auto kGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);  // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
const auto kPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);   // CUDNN_ATTR_EXECUTION_PLAN_HANDLE

/// The backend forward convolution of `shape` from x (uid 'x') and w ('w') into `y`; the
/// descriptors it is built from are kept in `parts`. Nothing when cuDNN has none for it.
std::optional<BackendDesc> conv_operation(const ConvShape& shape, bool channels_last, cudnnBackendDescriptor_t y,
                                          std::vector<BackendDesc>& parts) {
  std::vector<int> xdims = {shape.n, shape.c}, wdims = {shape.k, shape.c / shape.groups};
  xdims.insert(xdims.end(), shape.in.begin(), shape.in.end());
  wdims.insert(wdims.end(), shape.filter.begin(), shape.filter.end());
  parts.push_back(backend_tensor('x', xdims, channels_last, cudnn_type(shape.in_dtype)));
  cudnnBackendDescriptor_t xd = parts.back().get();
  parts.push_back(backend_tensor('w', wdims, channels_last, cudnn_type(shape.in_dtype)));
  cudnnBackendDescriptor_t wd = parts.back().get();
  BackendDesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const std::int64_t spatial = static_cast<std::int64_t>(shape.in.size());
  std::vector<std::int64_t> pad(shape.pad.begin(), shape.pad.end()), stride(shape.stride.begin(), shape.stride.end()),
      dil(shape.dil.begin(), shape.dil.end());
  const cudnnDataType_t comp = conv_compute_type(shape);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp), "conv comp type");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode), "conv mode");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial), "conv dims");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad.data(), spatial), "pre pad");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad.data(), spatial), "post pad");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride.data(), spatial), "strides");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dil.data(), spatial), "dilations");
  cudnn_ok(conv.finalize(), "conv finalize");
  BackendDesc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1, beta = 0;
  cudnnBackendDescriptor_t cd = conv.get();
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, &xd), "op x");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, &wd), "op w");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y), "op y");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cd), "op conv");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &alpha), "op alpha");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &beta), "op beta");
  parts.push_back(std::move(conv));
  if (op.finalize() != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return op;
}

/// The finalized operation graph of `ops`, or nothing when cuDNN refuses it.
std::optional<BackendDesc> operation_graph(cudnnHandle_t h, const std::vector<cudnnBackendDescriptor_t>& ops) {
  BackendDesc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnn_ok(graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
                     static_cast<std::int64_t>(ops.size())),
           "graph ops");
  cudnn_ok(graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, &h), "graph handle");
  if (graph.finalize() != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return graph;
}

/// The engine configs cuDNN 9 offers for operation graph `gd`, each with a label: those of
/// heuristic modes A and B (tuned knobs, at most `heuristic_limit` of each), then, with
/// `all_engines`, every engine of the graph with its default knobs (but those compiled at run
/// time), as frameworks drive them.
std::vector<std::pair<std::string, BackendDesc>> engine_configs(cudnnBackendDescriptor_t gd, bool all_engines,
                                                                std::int64_t heuristic_limit) {
  std::vector<std::pair<std::string, BackendDesc>> configs;
  auto engine_index = [](cudnnBackendDescriptor_t cfg) {
    BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    std::int64_t n = 0, index = -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) ==
        CUDNN_STATUS_SUCCESS)
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    return index;
  };
  for (const auto& [heur_mode, heur_name] :
       {std::pair<cudnnBackendHeurMode_t, const char*>{CUDNN_HEUR_MODE_A, "heur A"}, {CUDNN_HEUR_MODE_B, "heur B"}}) {
    BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnn_ok(heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &gd), "heur graph");
    cudnn_ok(heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &heur_mode), "heur mode");
    if (heur.finalize() != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS)
      continue;
    count = std::min<std::int64_t>(count, heuristic_limit);
    std::vector<BackendDesc> owned;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (std::int64_t i = 0; i < count; ++i) {
      owned.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(owned.back().get());
    }
    std::int64_t got = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                 raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (std::int64_t i = 0; i < got; ++i) {
      const std::int64_t index = engine_index(raw[i]);
      configs.emplace_back("cudnn9 engine " + std::to_string(index) + " (" + heur_name + " #" + std::to_string(i) + ")",
                           std::move(owned[i]));
    }
  }
  std::int64_t engines = 0, n = 0;
  if (all_engines)
    cudnnBackendGetAttribute(gd, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &engines);
  for (std::int64_t e = 0; e < engines; ++e) {
    BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnn_ok(engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &gd), "engine graph");
    cudnn_ok(engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &e), "engine index");
    if (engine.finalize() != CUDNN_STATUS_SUCCESS) continue;  // not for this graph
    // Engines compiled at run time take seconds each to build per shape; the heuristics above
    // still offer them where cuDNN expects them to win.
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    std::int64_t note_count = 0;
    cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                             CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &note_count, notes);
    if (std::find(notes, notes + note_count, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != notes + note_count) continue;
    BackendDesc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    cudnnBackendDescriptor_t ed = engine.get();
    cudnn_ok(cfg.set(CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, &ed), "cfg engine");
    if (cfg.finalize() != CUDNN_STATUS_SUCCESS) continue;
    configs.emplace_back("cudnn9 engine " + std::to_string(e) + " (all engines)", std::move(cfg));
  }


  return configs;
}

/// Runs the engine configs of graph `gd` on the graph's tensors in memory (`uids`, `ptrs`):
/// every config's plan is built and screened by a quick timing (the minimum of 3 event-timed
/// runs), then the fastest are offered to `s` until 3 are correct: timing each of ~100 engines
/// the full way would take minutes per row.
void run_engine_configs(cudnnHandle_t h, cudnnBackendDescriptor_t gd, const std::vector<std::int64_t>& uids,
                        std::vector<void*> ptrs, bool all_engines, std::int64_t heuristic_limit,
                        const std::string& suffix, Search& s) {
  std::vector<std::pair<std::string, BackendDesc>> configs = engine_configs(gd, all_engines, heuristic_limit);
  std::int64_t n = 0;
  struct Ready {
    std::string label;
    std::unique_ptr<BackendDesc> plan, pack;
    std::unique_ptr<Buffer> scratch;
    float quick_ms = 0;
  };
  std::vector<Ready> ready;
  cudaEvent_t e0, e1;
  cuda_ok(cudaEventCreate(&e0), "event");
  cuda_ok(cudaEventCreate(&e1), "event");
  for (auto& [label, cfg] : configs) {
    Ready r;
    r.label = label;
    r.plan = std::make_unique<BackendDesc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t cfgd = cfg.get();
    cudnn_ok(r.plan->set(kPlanHandle, CUDNN_TYPE_HANDLE, &h), "plan handle");
    cudnn_ok(r.plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfgd), "plan cfg");
    trace(label + " plan");
    if (r.plan->finalize() != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t ws_bytes = 0;
    cudnnBackendGetAttribute(r.plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws_bytes);
    if (ws_bytes > (std::int64_t{4} << 30)) continue;
    r.scratch = std::make_unique<Buffer>(static_cast<std::size_t>(ws_bytes));
    r.pack = std::make_unique<BackendDesc>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const auto count = static_cast<std::int64_t>(uids.size());
    cudnn_ok(r.pack->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), count), "pack uids");
    cudnn_ok(r.pack->set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(), count),
             "pack pointers");
    void* scratch_p = r.scratch->p;
    cudnn_ok(r.pack->set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &scratch_p), "pack workspace");
    if (r.pack->finalize() != CUDNN_STATUS_SUCCESS) continue;
    cudnnSetStream(h, nullptr);
    trace(label + " quick timing");
    cudaEventRecord(e0);
    bool ok = cudnnBackendExecute(h, r.plan->get(), r.pack->get()) == CUDNN_STATUS_SUCCESS;  // warm-up
    cudaEventRecord(e1);
    float first_ms = 0;
    ok = ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&first_ms, e0, e1) == cudaSuccess;
    r.quick_ms = first_ms;
    // Far slower than the best so far even cold: one run tells enough.
    const float best_ms = ready.empty() ? 1e30f : std::min_element(ready.begin(), ready.end(), [](const Ready& a, const Ready& b) {
                                                   return a.quick_ms < b.quick_ms;
                                                 })->quick_ms;
    for (int i = 0; ok && i < 3 && first_ms < 10 * best_ms; ++i) {
      cudaEventRecord(e0);
      ok = cudnnBackendExecute(h, r.plan->get(), r.pack->get()) == CUDNN_STATUS_SUCCESS;
      cudaEventRecord(e1);
      float ms = 0;
      ok = ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
      r.quick_ms = std::min(r.quick_ms, ms);
    }
    if (!ok) {
      cudaGetLastError();
      continue;
    }
    ready.push_back(std::move(r));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ready.begin(), ready.end(), [](const Ready& a, const Ready& b) { return a.quick_ms < b.quick_ms; });
  int correct = 0;
  for (const Ready& r : ready) {
    if (correct == 3) break;
    auto launch = [&](void* stream) {
      cudnnSetStream(h, static_cast<cudaStream_t>(stream));
      return cudnnBackendExecute(h, r.plan->get(), r.pack->get()) == CUDNN_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    };
    const int wrong_before = s.wrong;
    if (s.consider(r.label + suffix, launch)) correct += s.wrong == wrong_before;
  }
}

/// The legacy API's descriptors of a convolution in one layout.
struct LegacyConv {
  LegacyConv(const ConvShape& shape, bool channels_last) {
    const cudnnTensorFormat_t fmt = channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const int nb = 2 + static_cast<int>(shape.in.size());
    cudnn_ok(cudnnCreateTensorDescriptor(&x), "x");
    cudnn_ok(cudnnCreateTensorDescriptor(&y), "y");
    cudnn_ok(cudnnCreateFilterDescriptor(&w), "w");
    cudnn_ok(cudnnCreateConvolutionDescriptor(&conv), "conv");
    std::vector<int> xdims = {shape.n, shape.c}, wdims = {shape.k, shape.c / shape.groups};
    xdims.insert(xdims.end(), shape.in.begin(), shape.in.end());
    wdims.insert(wdims.end(), shape.filter.begin(), shape.filter.end());
    cudnn_ok(cudnnSetTensorNdDescriptorEx(x, fmt, cudnn_type(shape.in_dtype), nb, xdims.data()), "x");
    cudnn_ok(cudnnSetFilterNdDescriptor(w, cudnn_type(shape.in_dtype), fmt, nb, wdims.data()), "w");
    cudnn_ok(cudnnSetConvolutionNdDescriptor(conv, nb - 2, shape.pad.data(), shape.stride.data(), shape.dil.data(),
                                             CUDNN_CROSS_CORRELATION, conv_compute_type(shape)),
             "conv");
    cudnn_ok(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH), "math type");
    cudnn_ok(cudnnSetConvolutionGroupCount(conv, shape.groups), "group count");
    ydims.resize(nb);
    cudnn_ok(cudnnGetConvolutionNdForwardOutputDim(conv, x, w, nb, ydims.data()), "output dims");
    cudnn_ok(cudnnSetTensorNdDescriptorEx(y, fmt, cudnn_type(shape.out_dtype), nb, ydims.data()), "y");
  }
  /// The workspace `algo` needs, or nothing when it does not run this convolution.
  std::optional<std::size_t> workspace(cudnnHandle_t h, cudnnConvolutionFwdAlgo_t algo) const {
    std::size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, algo, &bytes) != CUDNN_STATUS_SUCCESS)
      return std::nullopt;
    return bytes;
  }
  ~LegacyConv() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  LegacyConv(const LegacyConv&) = delete;
  LegacyConv& operator=(const LegacyConv&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::vector<int> ydims;
};

/// The legacy forward algorithms worth trying on `shape`: cuDNN runs its FFT algorithms group by
/// group (on a depthwise layer of 192 groups FFT_TILING did not finish in 40 s), and they never
/// win on grouped convolutions, so they are left out there.
std::vector<cudnnConvolutionFwdAlgo_t> legacy_algos(const ConvShape& shape) {
  std::vector<cudnnConvolutionFwdAlgo_t> algos;
  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(a);
    if (shape.groups == 1 || (algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT && algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING))
      algos.push_back(algo);
  }
  return algos;
}

/// The bare convolution through the backend API, into `out` (tmap's values in cuDNN's layout).
void cudnn_backend_engines(cudnnHandle_t h, const ConvShape& shape, bool channels_last, const std::vector<int>& ydims,
                           const void* in, const void* filter, Search& s) {
  std::vector<BackendDesc> parts;
  parts.push_back(backend_tensor('y', ydims, channels_last, cudnn_type(shape.out_dtype)));
  const std::optional<BackendDesc> op = conv_operation(shape, channels_last, parts.back().get(), parts);
  if (!op) return;  // this convolution has no backend operation
  const std::optional<BackendDesc> graph = operation_graph(h, {op->get()});
  if (!graph) return;
  run_engine_configs(h, graph->get(), {'x', 'w', 'y'}, {const_cast<void*>(in), const_cast<void*>(filter), s.out}, true,
                     16, channels_last ? " (nhwc)" : " (nchw)", s);
}

/// A pointwise operation's mode for an epilogue op, if cuDNN has one.
std::optional<cudnnPointwiseMode_t> pointwise_mode(tmap::EpiOp op) {
  using tmap::EpiOp;
  switch (op) {
    case EpiOp::kNeg: return CUDNN_POINTWISE_NEG;
    case EpiOp::kAdd: return CUDNN_POINTWISE_ADD;
    case EpiOp::kSub: return CUDNN_POINTWISE_SUB;
    case EpiOp::kMul: return CUDNN_POINTWISE_MUL;
    case EpiOp::kDiv: return CUDNN_POINTWISE_DIV;
    case EpiOp::kMin: return CUDNN_POINTWISE_MIN;
    case EpiOp::kMax: return CUDNN_POINTWISE_MAX;
    case EpiOp::kClamp: case EpiOp::kRelu: case EpiOp::kLeakyRelu: return CUDNN_POINTWISE_RELU_FWD;
    case EpiOp::kSigmoid: return CUDNN_POINTWISE_SIGMOID_FWD;
    case EpiOp::kTanh: return CUDNN_POINTWISE_TANH_FWD;
    case EpiOp::kSilu: return CUDNN_POINTWISE_SWISH_FWD;
    case EpiOp::kGelu: return CUDNN_POINTWISE_GELU_FWD;
    case EpiOp::kGeluTanh: return CUDNN_POINTWISE_GELU_APPROX_TANH_FWD;
    default: return std::nullopt;
  }
}

/// Builds the pointwise operations of an epilogue after the convolution (cuDNN's fused graph).
class PointwiseGraph {
 public:
  PointwiseGraph(const Compute& c, const EpilogueView& v, tmap::Workspace& ws, const std::vector<int>& ydims,
                 bool channels_last)
      : c_(c), v_(v), ws_(ws), ydims_(ydims), channels_last_(channels_last), t_(epilogue_tree(c.epilogue)) {
    // cuDNN's dimension d is tmap's output dimension dim_[d]: [N, C, spatial...] against tmap's
    // [N, spatial..., C] when channels-last.
    const int nd = static_cast<int>(ydims.size());
    for (int d = 0; d < nd; ++d) dim_.push_back(!channels_last ? d : d == 0 ? 0 : d == 1 ? nd - 1 : d - 1);
  }

  /// The operations after `conv_out` (uid 'c'), the last writing 'y'; empty with `why`.
  std::vector<cudnnBackendDescriptor_t> build(cudnnBackendDescriptor_t conv_out, tmap::DType out_dtype, std::string& why) {
    if (v_.out_shape.size() != ydims_.size()) {
      why = "the output has another rank in cuDNN";
      return {};
    }
    conv_out_ = conv_out;
    out_type_ = cudnn_type(out_dtype);
    std::vector<cudnnBackendDescriptor_t> ops;
    if (t_.nodes[t_.root].op == tmap::EpiOp::kAcc) {
      why = "the epilogue has no operation";
      return {};
    }
    return tensor_of(t_.root, ops, why) ? ops : std::vector<cudnnBackendDescriptor_t>{};
  }
  const std::vector<std::int64_t>& uids() const { return uids_; }
  const std::vector<void*>& ptrs() const { return ptrs_; }

 private:
  /// The tensor holding node `n`'s value, adding the operations that compute it to `ops`.
  cudnnBackendDescriptor_t tensor_of(int n, std::vector<cudnnBackendDescriptor_t>& ops, std::string& why) {
    using tmap::EpiOp;
    const tmap::EpiNode& node = t_.nodes[n];
    if (node.op == EpiOp::kAcc) return conv_out_;
    if (node.op == EpiOp::kOperand) return operand(node.operand, why);
    if (node.op == EpiOp::kConst) return scalar(node.value);
    std::optional<BackendDesc> pw = pointwise(n, why);
    if (!pw) return nullptr;
    const std::vector<int>& args = t_.args[n];
    const bool binary = tmap::epi_arity(node.op) == 2 && node.op != EpiOp::kLeakyRelu;
    cudnnBackendDescriptor_t x = tensor_of(args[0], ops, why);
    cudnnBackendDescriptor_t bt = binary ? tensor_of(args[1], ops, why) : nullptr;
    if (!x || (binary && !bt)) return nullptr;
    const bool last = n == t_.root;
    const std::int64_t uid = last ? 'y' : 1000 + n;
    parts_.push_back(backend_tensor(uid, ydims_, channels_last_,
                                    last ? out_type_ : CUDNN_DATA_FLOAT, !last));
    cudnnBackendDescriptor_t y = parts_.back().get();
    BackendDesc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cudnnBackendDescriptor_t pwd = pw->get();
    cudnn_ok(op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, &pwd), "op pw");
    cudnn_ok(op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x), "op x");
    if (binary) cudnn_ok(op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &bt), "op b");
    cudnn_ok(op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y), "op y");
    if (op.finalize() != CUDNN_STATUS_SUCCESS) return fail(why, "cuDNN refuses a pointwise operation");
    parts_.push_back(std::move(*pw));
    parts_.push_back(std::move(op));
    ops.push_back(parts_.back().get());
    return y;
  }

  /// The pointwise descriptor of op node `n`: its mode, and the constants of clamp and
  /// leaky_relu as attributes of cuDNN's RELU.
  std::optional<BackendDesc> pointwise(int n, std::string& why) {
    using tmap::EpiOp;
    const tmap::EpiNode& node = t_.nodes[n];
    const auto mode = pointwise_mode(node.op);
    if (!mode) return fail_desc(why, "no pointwise mode for an op");
    BackendDesc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    bool ok = true;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    ok = ok && pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &*mode) == CUDNN_STATUS_SUCCESS;
    ok = ok && pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec) == CUDNN_STATUS_SUCCESS;
    const std::vector<int>& args = t_.args[n];
    // Constant arguments of clamp and leaky_relu are attributes of cuDNN's RELU.
    auto constant = [&](int i, double& out) {
      if (t_.nodes[args[i]].op != EpiOp::kConst) return false;
      out = t_.nodes[args[i]].value;
      return true;
    };
    double a = 0, b = 0;
    if (node.op == EpiOp::kRelu) {
      ok = ok && pw.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, &a) == CUDNN_STATUS_SUCCESS;
    } else if (node.op == EpiOp::kLeakyRelu) {
      if (!constant(1, a)) return fail_desc(why, "leaky_relu's slope is not a constant");
      ok = ok && pw.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, &b) == CUDNN_STATUS_SUCCESS;
      ok = ok && pw.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, &a) == CUDNN_STATUS_SUCCESS;
    } else if (node.op == EpiOp::kClamp) {
      if (!constant(1, a) || !constant(2, b)) return fail_desc(why, "clamp's bounds are not constants");
      ok = ok && pw.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, &a) == CUDNN_STATUS_SUCCESS;
      ok = ok && pw.set(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, &b) == CUDNN_STATUS_SUCCESS;
    } else if (node.op == EpiOp::kSilu) {
      const double beta = 1;
      ok = ok && pw.set(CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_DOUBLE, &beta) == CUDNN_STATUS_SUCCESS;
    }
    if (!ok || pw.finalize() != CUDNN_STATUS_SUCCESS) return fail_desc(why, "cuDNN refuses a pointwise mode");
    return pw;
  }

  /// Operand i as a tensor broadcast to the output's dimensions in cuDNN's order.
  cudnnBackendDescriptor_t operand(int i, std::string& why) {
    if (auto it = operands_.find(i); it != operands_.end()) return it->second;
    const OperandView& o = v_.operands[i];
    std::vector<int> dims(ydims_.size(), 1);
    for (std::size_t d = 0; d < dims.size(); ++d)
      if (o.stride[dim_[d]] != 0) dims[d] = ydims_[d];
    const std::vector<std::int64_t> st = strides_of(dims, channels_last_);
    for (std::size_t d = 0; d < dims.size(); ++d)
      if (dims[d] > 1 && st[d] != o.stride[dim_[d]]) return fail(why, "an operand is not stored as cuDNN's layout");
    if (o.base != 0) return fail(why, "an operand is read from an offset");
    const std::int64_t uid = 100 + i;
    parts_.push_back(backend_tensor(uid, dims, channels_last_, cudnn_type(c_.tensors[o.tensor].dtype)));
    uids_.push_back(uid);
    ptrs_.push_back(ws_.device(o.tensor));
    return operands_[i] = parts_.back().get();
  }

  /// A float32 constant passed by value.
  cudnnBackendDescriptor_t scalar(double value) {
    values_.push_back(static_cast<float>(value));
    const std::int64_t uid = 200 + static_cast<std::int64_t>(values_.size());
    BackendDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::vector<std::int64_t> ones(ydims_.size(), 1);
    const cudnnDataType_t type = CUDNN_DATA_FLOAT;
    const bool by_value = true;
    const std::int64_t align = 4, nd = static_cast<std::int64_t>(ones.size());
    cudnn_ok(t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type), "scalar dtype");
    cudnn_ok(t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, ones.data(), nd), "scalar dims");
    cudnn_ok(t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, ones.data(), nd), "scalar strides");
    cudnn_ok(t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid), "scalar uid");
    cudnn_ok(t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align), "scalar alignment");
    cudnn_ok(t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value), "scalar by value");
    cudnn_ok(t.finalize(), "scalar finalize");
    parts_.push_back(std::move(t));
    uids_.push_back(uid);
    ptrs_.push_back(&values_.back());
    return parts_.back().get();
  }

  static std::nullptr_t fail(std::string& why, const char* reason) {
    if (why.empty()) why = reason;
    return nullptr;
  }
  static std::optional<BackendDesc> fail_desc(std::string& why, const char* reason) {
    fail(why, reason);
    return std::nullopt;
  }

  const Compute& c_;
  const EpilogueView& v_;
  tmap::Workspace& ws_;
  const std::vector<int> ydims_;
  const bool channels_last_;
  const EpiTree t_;
  std::vector<int> dim_;
  cudnnBackendDescriptor_t conv_out_ = nullptr;
  cudnnDataType_t out_type_ = CUDNN_DATA_HALF;
  std::deque<BackendDesc> parts_;  // (a deque keeps the descriptors where they are)
  std::deque<float> values_;
  std::map<int, cudnnBackendDescriptor_t> operands_;
  std::vector<std::int64_t> uids_;
  std::vector<void*> ptrs_;
};

/// The convolution and the epilogue as one backend graph: the heuristics' engine configs
/// (runtime-fused engines among them) of the graph, in tmap's layout.
void cudnn_fused_graph(cudnnHandle_t h, const Compute& c, const EpilogueView& v, tmap::Workspace& ws,
                       const ConvShape& shape, const std::vector<int>& ydims, Search& s,
                       std::string& why) {
  const bool cl = shape.tmap_channels_last;
  std::vector<BackendDesc> parts;
  parts.push_back(backend_tensor('c', ydims, cl, CUDNN_DATA_FLOAT, true));
  const std::optional<BackendDesc> conv = conv_operation(shape, cl, parts.back().get(), parts);
  if (!conv) {
    why = "no backend convolution";
    return;
  }
  PointwiseGraph pw(c, v, ws, ydims, cl);
  std::vector<cudnnBackendDescriptor_t> ops = pw.build(parts.front().get(), shape.out_dtype, why);
  if (ops.empty()) return;
  ops.insert(ops.begin(), conv->get());
  const std::optional<BackendDesc> graph = operation_graph(h, ops);
  if (!graph) {
    why = "cuDNN refuses the graph";
    return;
  }
  std::vector<std::int64_t> uids = {'x', 'w', 'y'};
  std::vector<void*> ptrs = {ws.device(c.inputs[0].tensor), ws.device(c.inputs[1].tensor), s.out};
  uids.insert(uids.end(), pw.uids().begin(), pw.uids().end());
  ptrs.insert(ptrs.end(), pw.ptrs().begin(), pw.ptrs().end());
  const int tried = s.tried;
  run_engine_configs(h, graph->get(), uids, ptrs, false, 8, cl ? " fused graph (nhwc)" : " fused graph (nchw)", s);
  if (s.tried == tried) why = "no engine runs the graph";
}

/// cudnnConvolutionBiasActivationForward, y = act(alpha1 * conv(x, w) + alpha2 * z + bias), in
/// tmap's layout: for epilogues of that form, a per-channel scale folded into the filter.
void cudnn_conv_bias_act(cudnnHandle_t h, const Compute& c, const EpilogueView& v, tmap::Workspace& ws,
                         const ConvShape& shape, Search& s, std::string& why) {
  const bool cl = shape.tmap_channels_last;
  const int nb = 2 + static_cast<int>(shape.in.size());
  const std::optional<BiasActForm> form = bias_act_form(c, v, cl ? nb - 1 : 1);
  if (!form || (form->act != tmap::EpiOp::kAcc && form->act != tmap::EpiOp::kRelu)) {
    why = "not relu(conv * scale + bias + residual)";
    return;
  }
  if (v.out_shape.size() != static_cast<std::size_t>(nb)) {
    why = "the output has another rank in cuDNN";
    return;
  }
  const cudnnDataType_t out_type = cudnn_type(shape.out_dtype);
  const LegacyConv d(shape, cl);
  cudnnTensorDescriptor_t bias;
  cudnnActivationDescriptor_t act;
  cudnn_ok(cudnnCreateTensorDescriptor(&bias), "bias");
  cudnn_ok(cudnnCreateActivationDescriptor(&act), "activation");
  std::vector<int> bdims(nb, 1);
  bdims[1] = shape.k;
  cudnn_ok(cudnnSetTensorNdDescriptorEx(bias, cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, out_type, nb, bdims.data()),
           "bias");
  const bool relu = form->act == tmap::EpiOp::kRelu;
  cudnn_ok(cudnnSetActivationDescriptor(act, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                        CUDNN_PROPAGATE_NAN, 0.0),
           "activation");
  // The filter with the per-channel scale folded in, as frameworks fold a BatchNorm.
  const int wt = c.inputs[1].tensor;
  std::unique_ptr<Buffer> scaled;
  if (form->scale != -1) {
    const std::vector<double>& f = ws.host_values()[wt];
    const std::vector<double>& sc = ws.host_values()[v.operands[form->scale].tensor];
    const std::size_t per_k = f.size() / static_cast<std::size_t>(shape.k);
    std::vector<double> folded(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) folded[i] = f[i] * sc[i / per_k];
    scaled = upload(folded, shape.in_dtype);
  }
  std::unique_ptr<Buffer> zero_bias;
  if (form->bias == -1) {
    zero_bias = upload(std::vector<double>(static_cast<std::size_t>(shape.k), 0.0), shape.out_dtype);
  }
  const bool bias_ok = form->bias == -1 || c.tensors[v.operands[form->bias].tensor].dtype == c.tensor_of(c.output).dtype;
  const bool z_ok = form->residual == -1 || c.tensors[v.operands[form->residual].tensor].dtype == c.tensor_of(c.output).dtype;
  const void* in = ws.device(c.inputs[0].tensor);
  const void* filter = scaled ? scaled->p : ws.device(wt);
  const void* bias_p = form->bias == -1 ? zero_bias->p : ws.device(v.operands[form->bias].tensor);
  const void* z = form->residual == -1 ? s.out : ws.device(v.operands[form->residual].tensor);
  const float alpha1 = static_cast<float>(form->alpha), alpha2 = form->residual == -1 ? 0.0f : 1.0f;
  for (const auto algo : legacy_algos(shape)) {
    // cuDNN computes an identity activation with IMPLICIT_PRECOMP_GEMM only.
    const auto ws_bytes = d.workspace(h, algo);
    if (!bias_ok || !z_ok || (!relu && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) || !ws_bytes) continue;
    Buffer scratch(*ws_bytes);
    s.consider(std::string("cudnnConvolutionBiasActivationForward ") + algo_name(algo) + (cl ? " (nhwc)" : " (nchw)"),
               [&](void* stream) {
                 cudnnSetStream(h, static_cast<cudaStream_t>(stream));
                 return cudnnConvolutionBiasActivationForward(h, &alpha1, d.x, in, d.w, filter, d.conv, algo,
                                                              scratch.p, *ws_bytes, &alpha2, d.y, z, bias, bias_p, act,
                                                              d.y, s.out) == CUDNN_STATUS_SUCCESS
                            ? 0
                            : static_cast<int>(cudaErrorUnknown);
               });
  }
  if (!bias_ok || !z_ok) why = "the bias or residual is not of the output's dtype";
  cudnnDestroyActivationDescriptor(act);
  cudnnDestroyTensorDescriptor(bias);
}

/// The convolution's output dimensions [N, K, spatial...].
std::vector<int> conv_output_dims(const ConvShape& shape) {
  std::vector<int> d = {shape.n, shape.k};
  for (std::size_t i = 0; i < shape.in.size(); ++i) {
    const int extent = (shape.in[i] + 2 * shape.pad[i] - shape.dil[i] * (shape.filter[i] - 1) - 1) / shape.stride[i] + 1;
    d.push_back(extent);
  }
  return d;
}

}  // namespace

std::optional<Baseline> cudnn_baseline(const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                                       const std::vector<double>& tmap_out, const ConvShape& shape,
                                       bool channels_last, int graph_runs, const PostOps* post) {
  const bool transpose = channels_last != shape.tmap_channels_last;
  if (transpose && post) throw std::logic_error("the unfused sequence runs in tmap's layout only");
  cudnnHandle_t h;
  cudnn_ok(cudnnCreate(&h), "cudnnCreate");
  std::unique_ptr<cudnnContext, decltype(&cudnnDestroy)> h_owner(h, &cudnnDestroy);
  const LegacyConv d(shape, channels_last);
  const std::vector<int>& ydims = d.ydims;
  const std::size_t out_elems = product(ydims), out_inner = out_elems / ydims[0] / ydims[1];
  if (out_elems != ref.size()) throw std::runtime_error("cuDNN's output size differs from the compute's");
  const std::size_t out_bytes = bytes_of(shape.out_dtype, out_elems);
  Buffer out(out_bytes);
  // The inputs in cuDNN's layout: tmap's own buffers, or transposed copies of their values.
  std::unique_ptr<Buffer> in_copy, filter_copy;
  auto transposed = [&](int tensor, std::size_t outer, std::size_t channels, std::size_t inner) {
    return upload(move_channels(ws.host_values()[tensor], outer, channels, inner, channels_last), shape.in_dtype);
  };
  if (transpose) {
    in_copy = transposed(c.inputs[0].tensor, shape.n, shape.c, product(shape.in));
    filter_copy = transposed(c.inputs[1].tensor, shape.k, shape.c / shape.groups, product(shape.filter));
  }
  const void* in = transpose ? in_copy->p : ws.device(c.inputs[0].tensor);
  const void* filter = transpose ? filter_copy->p : ws.device(c.inputs[1].tensor);
  Search s(ref, tmap_out, graph_runs, out.p, out_bytes, [&] {
             std::vector<double> got = read_output(out.p, out_elems, shape.out_dtype);
             // Back into tmap's layout, to compare (channels-first to -last when tmap is channels-last).
             return transpose ? move_channels(got, ydims[0], ydims[1], out_inner, shape.tmap_channels_last) : got;
           }, post);
  const float alpha = 1, beta = 0;
  for (const auto algo : legacy_algos(shape)) {
    const auto ws_bytes = d.workspace(h, algo);
    if (!ws_bytes) continue;
    Buffer scratch(*ws_bytes);
    s.consider(std::string("cudnn ") + algo_name(algo) + (channels_last ? " (nhwc)" : " (nchw)"), [&](void* stream) {
      cudnnSetStream(h, static_cast<cudaStream_t>(stream));
      return cudnnConvolutionForward(h, &alpha, d.x, in, d.w, filter, d.conv, algo, scratch.p, *ws_bytes, &beta, d.y,
                                     out.p) == CUDNN_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    });
  }
  // cuDNN 9's engines (the graph API frameworks use): the strongest baseline is the fastest of both.
  cudnn_backend_engines(h, shape, channels_last, ydims, in, filter, s);
  return s.result();
}

std::optional<Baseline> cudnn_fused_baseline(const Compute& c, tmap::Workspace& ws, const EpilogueView& v,
                                             const std::vector<double>& ref, const std::vector<double>& tmap_out,
                                             const ConvShape& shape, int graph_runs, std::string& note) {
  cudnnHandle_t h;
  cudnn_ok(cudnnCreate(&h), "cudnnCreate");
  std::unique_ptr<cudnnContext, decltype(&cudnnDestroy)> h_owner(h, &cudnnDestroy);
  const std::size_t out_bytes = bytes_of(shape.out_dtype, ref.size());
  Buffer out(out_bytes);
  Search s(ref, tmap_out, graph_runs, out.p, out_bytes, [&] { return read_output(out.p, ref.size(), shape.out_dtype); });
  std::string graph_why, legacy_why;
  // A call cuDNN refuses is a note of the row, not the end of the benchmark.
  try {
    cudnn_fused_graph(h, c, v, ws, shape, conv_output_dims(shape), s, graph_why);
  } catch (const std::runtime_error& e) {
    graph_why = e.what();
  }
  try {
    cudnn_conv_bias_act(h, c, v, ws, shape, s, legacy_why);
  } catch (const std::runtime_error& e) {
    legacy_why = e.what();
  }
  if (!graph_why.empty()) note += "cuDNN fused graph: " + graph_why;
  if (!legacy_why.empty())
    note += std::string(note.empty() ? "" : "; ") + "cudnnConvolutionBiasActivationForward: " + legacy_why;
  return s.result();
}

}  // namespace bench
