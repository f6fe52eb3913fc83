// A/B of a code-generation change: the same logged kernels generated before and after it, timed
// alternately in one process (CUDA graphs of 20 launches of the exported launch functions,
// median of 15 replays; 4 rounds of old then new, the middle two of each averaged). Inputs are
// constant (timing only; correctness is the GPU tests' and `tmap replay`'s).
//
// On the GPU machine, from the repository root, with OLD and NEW tmap binaries:
//   for l in gemm resnet18_b16; do OLD/tmap export logs/h100_$l.jsonl --out /tmp/old/$l;
//                                  NEW/tmap export logs/h100_$l.jsonl --out /tmp/new/$l; done
//   python3 benchmarks/experiments/ab_generated/make_cases.py /tmp/old /tmp/new /tmp/ab_src
//   benchmarks/experiments/ab_generated/build.sh /tmp/ab_src /tmp/new/gemm && /tmp/ab_src/ab
// (make_cases.py keeps the kernels whose source differs.)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "../graph_timing.cuh"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
typedef cudaError_t (*Fn)(const half*, const half*, void*, cudaStream_t);
struct Case { const char* key; long long a, b, c; int cb; Fn old_fn, new_fn; };
#include "cases.inc"
int main() {
  printf("%-14s %9s %9s %9s\n", "workload", "old us", "new us", "new/old");
  double lsum = 0; int n_cases = 0;
  for (const Case& c : cases) {
    half *A, *B; void* C;
    CK(cudaMalloc(&A, c.a * 2)); CK(cudaMalloc(&B, c.b * 2)); CK(cudaMalloc(&C, c.c * c.cb));
    CK(cudaMemset(A, 0x3c, c.a * 2)); CK(cudaMemset(B, 0x2c, c.b * 2));
    std::vector<float> o, n;
    for (int r = 0; r < 4; ++r) {
      o.push_back(time_graph_us([&](cudaStream_t s) { return c.old_fn(A, B, C, s); }));
      n.push_back(time_graph_us([&](cudaStream_t s) { return c.new_fn(A, B, C, s); }));
    }
    std::sort(o.begin(), o.end()); std::sort(n.begin(), n.end());
    const double ratio = (n[1] + n[2]) / (o[1] + o[2]);
    lsum += std::log(ratio); ++n_cases;
    printf("%-14s %9.2f %9.2f %9.3f   (old %.2f-%.2f, new %.2f-%.2f)\n", c.key, (o[1] + o[2]) / 2, (n[1] + n[2]) / 2, ratio, o[0], o[3], n[0], n[3]);
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C));
  }
  printf("geometric mean new/old over %d kernels: %.4f\n", n_cases, std::exp(lsum / n_cases));
}
