// The emitter of the WMMA family (nvcuda::wmma, warp scope): one implicit-GEMM CUDA kernel per
// candidate (virtual GEMM + schedule). Other families (mma.sync, wgmma) get emitters of their
// own beside this one.
//
// Kernel structure: each block computes a block_m x block_n tile of the virtual GEMM for one
// batch index (blockIdx.z); warps own warp_m x warp_n sub-tiles of accumulator fragments. The
// K loop (and any serial reduction loops) stages operand tiles through shared memory, one or
// two buffers; each element is gathered from the compute's tensors through the mapping, zero
// out of bounds. The epilogue stores fragments to shared memory and scatters them to the
// output through the output's indices.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tmap/codegen/implicit_gemm.h"
#include "tmap/schedule/schedule.h"

namespace tmap {

/// A generated kernel and how to launch it. Its parameters are, in order: the tensor playing
/// operand A, the tensor playing operand B, the output, and a workspace (device pointers).
/// With split-K, the main kernel writes partial sums to the workspace and a second kernel in
/// the same source (reduce_name, parameters: workspace, output) sums them into the output.
struct KernelSource {
  std::string name;
  std::string code;
  int threads = 0;
  std::int64_t shared_bytes = 0;
  std::array<std::int64_t, 3> grid{1, 1, 1};
  std::int64_t workspace_bytes = 0;  ///< 0: no workspace and no reduce kernel.
  std::string reduce_name;
  std::int64_t reduce_blocks = 0;
  int reduce_threads = 256;
};

/// Emits the kernel; the schedule must be valid (see validate()), else an InternalError.
KernelSource emit_wmma_kernel(const ImplicitGemm& g, const ScheduleParams& p);

}  // namespace tmap
