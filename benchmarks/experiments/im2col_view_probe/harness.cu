// Would an im2col view serve NCHW convolutions at batch 1? (#11, twenty-third session.)
//
// tmap's NCHW 3x3 convolutions read channels-last copies of the input and of the KCRS filters
// made by a relayout prologue; at batch 1 the filters are the larger copy (ResNet-18 l11: 4.7 MB
// of filters against 50 KB of input). An im2col view copies the input alone, as Col [P][Q][C][3][3]
// (im2col, padding written as zeros), whose reduction axis (c, r, s) is the KCRS filters' own, so
// the main kernel is a plain GEMM reading both in place along k. This probe builds it from parts:
// the GEMM is tmap's, tuned on the proxy computes pxcol_<layer>.json and exported (transform.py
// lets its main kernel wait for a prologue, griddepcontrol.wait, and optionally prefetch the
// filters to L2 before waiting); the prologue is im2col() below (a block per output row and 16
// channels: three input rows of each channel into shared memory, then 16-byte Col vectors).
// Each layer's columns, us per launch (CUDA graphs of 20 launches of the exported launch
// functions, median of 15 replays): NHWC, NCHW (tmap's shipped batch-1 records, relayout
// prologue), gemm (the proxy GEMM alone), im2col (the prologue alone), then the pair (im2col +
// GEMM as its programmatic dependent) with the dependents' launch triggered as the prologue
// starts (early) or after its copy (late), each also with the filter prefetch (+pf), and with an
// empty prologue (its floor). rel L2: the pair's output against a direct float32 convolution on
// fresh random inputs, output poisoned with NaN first, the worst of the four variants.
//
// Build and run on the GPU machine, from the repository root (after `tmap tune` of the proxies,
// see build.sh):
//   benchmarks/experiments/im2col_view_probe/build.sh build/bin/tmap PROXY_LOGS /tmp/probe
//   /tmp/probe/harness
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "../graph_timing.cuh"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
typedef cudaError_t (*LaunchFn)(const half*, const half*, half*, cudaStream_t);
typedef void (*SetFn)(int, const void*, long long);
struct Layer { const char* name; int C, H, W, K, ST; LaunchFn px; SetFn set; LaunchFn nhwc, nchw; };
#include "layers.inc"

struct alignas(16) V8 { half e[8]; };
constexpr int CB = 16, LOADS = 8;
// A block per (output row p, 16 channels): the three input rows of each channel into shared memory
// (zero padding included; every load of a thread issued before the first store), then the Q rows of
// 16 x 9 Col elements written as 16-byte vectors. empty: no copy (the floor of a prologue).
__global__ void im2col(const half* __restrict__ I, half* __restrict__ Col, int C, int H, int W, int P, int Q, int ST, int late, int empty) {
  if (!late) asm volatile("griddepcontrol.launch_dependents;");
  extern __shared__ half win[];  // [CB][3][W + 2]
  const int p = blockIdx.x % P, c0 = blockIdx.x / P * CB, W2 = W + 2, E = CB * 3 * W2;
  if (!empty) {
    half x[LOADS];
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int e = threadIdx.x + i * 256;
      const int col = e % W2, r = e / W2 % 3, cc = e / W2 / 3, h = p * ST - 1 + r, w = col - 1;
      x[i] = (e < E && h >= 0 && h < H && w >= 0 && w < W) ? I[((long long)(c0 + cc) * H + h) * W + w] : __float2half(0.f);
    }
#pragma unroll
    for (int i = 0; i < LOADS; ++i) if (threadIdx.x + i * 256 < E) win[threadIdx.x + i * 256] = x[i];
    __syncthreads();
    const int per_q = CB * 9 / 8;
    for (int v = threadIdx.x; v < Q * per_q; v += blockDim.x) {
      const int q = v / per_q, j0 = v % per_q * 8;
      V8 o;
#pragma unroll
      for (int l = 0; l < 8; ++l) {
        const int j = j0 + l, cc = j / 9, r = j / 3 % 3, s = j % 3;
        o.e[l] = win[(cc * 3 + r) * W2 + q * ST + s];
      }
      *reinterpret_cast<V8*>(Col + ((long long)(p * Q + q) * C + c0) * 9 + j0) = o;
    }
  }
  if (late) asm volatile("griddepcontrol.launch_dependents;");
}
__global__ void reference(const half* I, const half* Wt, float* out, int C, int H, int W, int K, int P, int Q, int ST) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= K * P * Q) return;
  const int k = e / (P * Q), p = e / Q % P, q = e % Q;
  float s = 0;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < 3; ++r)
      for (int t = 0; t < 3; ++t) {
        const int h = p * ST - 1 + r, w = q * ST - 1 + t;
        if (h < 0 || h >= H || w < 0 || w >= W) continue;
        s += __half2float(I[((long long)c * H + h) * W + w]) * __half2float(Wt[((long long)(k * C + c) * 3 + r) * 3 + t]);
      }
  out[e] = s;
}

static const Layer* g_layer; static const half* g_I; static half* g_Col; static int g_late, g_empty;
static int outsz(const Layer& L) { return (L.H + 2 - 3) / L.ST + 1; }
static void prologue(cudaStream_t s) {
  const Layer& L = *g_layer; const int P = outsz(L);
  im2col<<<P * (L.C / CB), 256, CB * 3 * (L.W + 2) * sizeof(half), s>>>(g_I, g_Col, L.C, L.H, L.W, P, P, L.ST, g_late, g_empty);
}
extern "C" { void (*px_prologue_fn)(cudaStream_t) = prologue; }


int main() {
  printf("%-5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %10s %10s\n", "layer", "NHWC", "NCHW", "gemm", "im2col", "early", "late", "early+pf", "late+pf", "empty", "rel L2", "ratio best");
  for (const Layer& L : layers) {
    g_layer = &L;
    const int P = outsz(L);
    const long long nI = (long long)L.C * L.H * L.W, nW = (long long)L.K * L.C * 9, nCol = (long long)P * P * L.C * 9, nO = (long long)L.K * P * P;
    half *I, *Wt, *Col, *Out; float* ref;
    CK(cudaMalloc(&I, nI * 2)); CK(cudaMalloc(&Wt, nW * 2)); CK(cudaMalloc(&Col, nCol * 2)); CK(cudaMalloc(&Out, nO * 2)); CK(cudaMalloc(&ref, nO * 4));
    std::vector<half> h(std::max(nI, nW)); unsigned seed = 12345u + L.C + L.H;
    auto fill = [&](half* d, long long n) { for (long long i = 0; i < n; ++i) { seed = seed * 1664525u + 1013904223u; h[i] = __float2half((seed >> 8) / 8388608.f - 1.f); } CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice)); };
    fill(I, nI); fill(Wt, nW);
    g_I = I; g_Col = Col;
    CK(cudaFuncSetAttribute(im2col, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    reference<<<(nO + 255) / 256, 256>>>(I, Wt, ref, L.C, L.H, L.W, L.K, P, P, L.ST);
    double worst = 0;
    for (int mode = 1; mode <= 2; ++mode)
      for (int late = 0; late <= 1; ++late) {
        g_late = late; L.set(mode, Wt, nW * 2);
        CK(cudaMemset(Col, 0xFF, nCol * 2)); CK(cudaMemset(Out, 0xFF, nO * 2));  // NaN poison
        CK(L.px(Col, Wt, Out, 0)); CK(cudaDeviceSynchronize());
        std::vector<half> o(nO); std::vector<float> r(nO);
        CK(cudaMemcpy(o.data(), Out, nO * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(r.data(), ref, nO * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (long long i = 0; i < nO; ++i) { const double d = __half2float(o[i]) - r[i]; num += d * d; den += (double)r[i] * r[i]; }
        const double rel = std::sqrt(num / den); worst = std::max(worst, std::isnan(rel) ? 1e9 : rel);
      }
    const float t_nhwc = time_graph_us([&](cudaStream_t s) { return L.nhwc(I, Wt, Out, s); });
    const float t_nchw = time_graph_us([&](cudaStream_t s) { return L.nchw(I, Wt, Out, s); });
    L.set(0, Wt, 0);
    const float t_gemm = time_graph_us([&](cudaStream_t s) { return L.px(Col, Wt, Out, s); });
    const float t_pro = time_graph_us([&](cudaStream_t s) { prologue(s); return cudaGetLastError(); });
    g_late = 0; L.set(1, Wt, nW * 2);
    float t[5];
    for (int v = 0; v < 5; ++v) {  // early, late, early+pf, late+pf, empty prologue (late)
      g_late = v == 1 || v == 3 || v == 4; g_empty = v == 4; L.set(v == 2 || v == 3 ? 2 : 1, Wt, nW * 2);
      t[v] = time_graph_us([&](cudaStream_t s) { return L.px(Col, Wt, Out, s); });
    }
    g_empty = 0;
    const float best = std::min(std::min(t[0], t[1]), std::min(t[2], t[3]));
    printf("%-5s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %10.2e %10.2f\n", L.name, t_nhwc, t_nchw, t_gemm, t_pro, t[0], t[1], t[2], t[3], t[4], worst, best / t_nhwc);
    L.set(0, Wt, 0);
    CK(cudaFree(I)); CK(cudaFree(Wt)); CK(cudaFree(Col)); CK(cudaFree(Out)); CK(cudaFree(ref));
  }
  return 0;
}
