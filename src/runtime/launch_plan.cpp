// Executes a launch plan (see launch_plan.h). Compiled into tmap and copied as it is into every
// export, so it includes nothing of tmap but its header, and reaches the driver (for tensor maps)
// through the runtime's entry-point query: neither links libcuda.
#include "tmap/runtime/launch_plan.h"

#include <cuda.h>  // CUtensorMap and its enums only

static_assert(sizeof(tmap_tensor_map) == sizeof(CUtensorMap), "a tensor map is 128 bytes");
static_assert(sizeof(cuuint64_t) == sizeof(unsigned long long), "dims and strides are 64-bit");

namespace {

/// A driver function looked up through the runtime; nullptr when the driver lacks it.
void* driver_entry(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? p : nullptr;
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
using EncodeIm2col = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const int*, const int*, cuuint32_t, cuuint32_t, const cuuint32_t*,
                                  CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                  CUtensorMapFloatOOBfill);

CUtensorMapSwizzle swizzle_of(int bytes) {
  return bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
}

void* pointer_of(const tmap_arg& a, void* const* slots) { return static_cast<char*>(slots[a.slot]) + a.offset; }

cudaError_t encode_map(const tmap_tensor_map_spec& spec, void* base, long long size, CUtensorMap* out) {
  tmap_tensor_map_spec m = spec;
  if (m.grow_per_size > 0 && size > 0) m.dims[m.grow_dim] = static_cast<unsigned long long>(size) * m.grow_per_size;
  static const auto tiled = reinterpret_cast<EncodeTiled>(driver_entry("cuTensorMapEncodeTiled"));
  static const auto im2col = reinterpret_cast<EncodeIm2col>(driver_entry("cuTensorMapEncodeIm2col"));
  if (m.im2col ? !im2col : !tiled) return cudaErrorNotSupported;
  const auto type = static_cast<CUtensorMapDataType>(m.dtype);
  const auto rank = static_cast<cuuint32_t>(m.rank);
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const auto* dims = reinterpret_cast<const cuuint64_t*>(m.dims);  // 64-bit both, spelt differently
  const auto* strides = reinterpret_cast<const cuuint64_t*>(m.strides);
  const CUresult r =
      m.im2col ? im2col(out, type, rank, base, dims, strides, m.lower, m.upper, m.box[0], m.box[1], m.traversal,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_of(m.swizzle_bytes), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
               : tiled(out, type, rank, base, dims, strides, m.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                       swizzle_of(m.swizzle_bytes), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/// Blocks (a multiple of cluster_x) of `kernel` resident on the current device at once.
cudaError_t resident_blocks(const tmap_launch_step& s, const void* kernel, long long* out) {
  if (s.cluster_x > 1) {  // clusters are placed whole, within one GPC: ask how many fit at once
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(s.grid[0]));
    config.blockDim = dim3(static_cast<unsigned>(s.threads));
    config.dynamicSmemBytes = static_cast<size_t>(s.shared_bytes);
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    *out = static_cast<long long>(clusters > 0 ? clusters : 1) * s.cluster_x;
    return e;
  }
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, s.threads, static_cast<size_t>(s.shared_bytes));
  *out = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  return e;
}

/// The step's grid at `size` (0: as the plan has it).
dim3 grid_at(const tmap_launch_step& s, long long size) {
  long long g[3] = {s.grid[0], s.grid[1], s.grid[2]};
  const tmap_grid_growth& w = s.growth;
  if (w.per_size > 0 && size > 0) g[w.axis] = (size * w.per_size + w.per_block - 1) / w.per_block * w.times;
  return dim3(static_cast<unsigned>(g[0]), static_cast<unsigned>(g[1]), static_cast<unsigned>(g[2]));
}

cudaError_t launch_step(const tmap_launch_step& s, const void* kernel, void* const* slots, const tmap_tensor_map* maps,
                        long long size, tmap_launch_cache& cache, cudaStream_t stream) {
  void* pointers[TMAP_PLAN_MAX_ARGS];
  void* args[TMAP_PLAN_MAX_ARGS];
  int size_arg = static_cast<int>(size);
  for (int i = 0; i < s.num_args; ++i) {
    const tmap_arg& a = s.args[i];
    if (a.slot == TMAP_SLOT_SIZE) {
      args[i] = &size_arg;
    } else if (a.slot >= TMAP_SLOT_MAP) {
      args[i] = const_cast<tmap_tensor_map*>(&maps[a.slot - TMAP_SLOT_MAP]);
    } else {
      pointers[i] = pointer_of(a, slots);
      args[i] = &pointers[i];
    }
  }
  dim3 grid = grid_at(s, size);
  if (s.persistent) {
    if (cache.resident == 0) {
      const cudaError_t e = resident_blocks(s, kernel, &cache.resident);
      if (e != cudaSuccess) return e;
    }
    const long long whole = cache.resident / s.cluster_x * s.cluster_x;
    if (whole < grid.x) grid.x = static_cast<unsigned>(whole);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(static_cast<unsigned>(s.threads));
  config.dynamicSmemBytes = static_cast<size_t>(s.shared_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (s.dependent && cache.major >= 9) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelExC(&config, kernel, args);
}

}  // namespace

extern "C" cudaError_t tmap_plan_prepare(const tmap_launch_plan* plan, const void* const* kernels) {
  for (int i = 0; i < plan->num_steps; ++i) {
    const tmap_launch_step& s = plan->steps[i];
    // Static shared memory (a kernel of a range of sizes keeps its size there) counts against
    // the 48 KiB a launch gets without asking. tmap's kernels declare at most a few KiB of it, so
    // only steps with more than 32 KiB of dynamic memory ask (a call per launch of an export).
    if (s.shared_bytes <= 32 * 1024) continue;
    cudaFuncAttributes attributes = {};
    cudaError_t e = cudaFuncGetAttributes(&attributes, kernels[s.kernel]);
    if (e != cudaSuccess) return e;
    if (s.shared_bytes + static_cast<long long>(attributes.sharedSizeBytes) <= 48 * 1024) continue;
    e = cudaFuncSetAttribute(kernels[s.kernel], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(s.shared_bytes));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

extern "C" int tmap_plan_takes_size(const tmap_launch_plan* plan, long long size) {
  return plan->size_lo > 0 ? plan->size_lo <= size && size <= plan->size_hi : size == 0;
}

extern "C" cudaError_t tmap_plan_encode_maps(const tmap_launch_plan* plan, void* const* slots, long long size,
                                             tmap_tensor_map* maps) {
  if (!tmap_plan_takes_size(plan, size)) return cudaErrorInvalidValue;
  for (int i = 0; i < plan->num_maps; ++i) {
    const tmap_tensor_map_spec& m = plan->maps[i];
    const cudaError_t e = encode_map(m, pointer_of(m.source, slots), size, reinterpret_cast<CUtensorMap*>(&maps[i]));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

extern "C" cudaError_t tmap_plan_enqueue(const tmap_launch_plan* plan, const void* const* kernels, void* const* slots,
                                         const tmap_tensor_map* maps, long long size, tmap_launch_cache* cache,
                                         cudaStream_t stream) {
  if (!tmap_plan_takes_size(plan, size)) return cudaErrorInvalidValue;
  tmap_launch_cache local = {-1, 0};
  if (!cache) cache = &local;
  if (cache->major < 0) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cache->major, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
  }
  for (int i = 0; i < plan->num_steps; ++i) {
    const tmap_launch_step& s = plan->steps[i];
    const cudaError_t e = launch_step(s, kernels[s.kernel], slots, maps, size, *cache, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

extern "C" cudaError_t tmap_plan_launch(const tmap_launch_plan* plan, const void* const* kernels, void** slots,
                                        long long size, cudaStream_t stream) {
  if (!tmap_plan_takes_size(plan, size)) return cudaErrorInvalidValue;
  void* workspace = nullptr;
  cudaError_t e = cudaSuccess;
  if (plan->workspace_bytes > 0) {
    e = cudaMallocAsync(&workspace, static_cast<size_t>(plan->workspace_bytes), stream);
    if (e != cudaSuccess) return e;
    slots[plan->workspace_slot] = workspace;
    if (plan->zeroed_bytes > 0)
      e = cudaMemsetAsync(static_cast<unsigned char*>(workspace) + plan->zeroed_offset, 0,
                          static_cast<size_t>(plan->zeroed_bytes), stream);
  }
  tmap_tensor_map maps[TMAP_PLAN_MAX_MAPS];
  if (e == cudaSuccess) e = tmap_plan_prepare(plan, kernels);
  if (e == cudaSuccess) e = tmap_plan_encode_maps(plan, slots, size, maps);
  if (e == cudaSuccess) e = tmap_plan_enqueue(plan, kernels, slots, maps, size, nullptr, stream);
  if (workspace) {
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    if (e == cudaSuccess) e = freed;
  }
  return e;
}
