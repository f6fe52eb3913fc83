// A generated kernel's launch as data: the launches of one run in order (grid, block, dynamic
// shared memory, cluster, programmatic dependence), the pointers each passes and the TMA tensor
// maps they read. tmap's runner and the measurement worker execute a plan through the functions
// below, and `tmap export` copies this header and src/runtime/launch_plan.cpp beside the kernels
// it writes, so that exported launchers execute the very same code. Plain data and the CUDA
// runtime only: nothing else of tmap is included here.
#pragma once

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  TMAP_PLAN_MAX_STEPS = 3,  ///< A relayout prologue, the main kernel, a split-K reduction.
  TMAP_PLAN_MAX_ARGS = 16,
  TMAP_PLAN_MAX_MAPS = 3,  ///< A's, B's, and the output's where the kernel stores by TMA.
  TMAP_PLAN_MAX_SLOTS = 16,  ///< Pointers a caller passes (a reference kernel takes every tensor).
  TMAP_SLOT_MAP = 64,        ///< An argument's slot TMAP_SLOT_MAP + i: the plan's tensor map i.
  TMAP_SLOT_SIZE = 96,       ///< An argument's slot: the run-time size, passed as an int.
};

/// One pointer: the caller's pointer in `slot` plus `offset` bytes (a relayouted operand is a
/// copy inside the workspace), or tensor map slot - TMAP_SLOT_MAP.
typedef struct {
  int slot;
  long long offset;
} tmap_arg;

/// How a launch of a plan for a range of sizes follows the run-time size: grid[axis] =
/// ceil(size x per_size / per_block) x times. per_size 0: the grid is fixed.
typedef struct {
  int axis;
  long long per_size, per_block, times;
} tmap_grid_growth;

typedef struct {
  int kernel;  ///< Index into the kernel handles the caller passes.
  long long grid[3];
  int threads;
  long long shared_bytes;  ///< Dynamic shared memory.
  /// Tiles taken with a grid stride: grid[0] blocks at most, as many as stay resident at once
  /// (whole clusters of cluster_x).
  int persistent;
  int cluster_x;  ///< Fixed by the kernel's __cluster_dims__; only persistent sizing reads it.
  /// A programmatic dependent of the previous step on sm_90 and newer: it starts while that
  /// step's last blocks finish and waits in griddepcontrol.wait.
  int dependent;
  int num_args;
  tmap_arg args[TMAP_PLAN_MAX_ARGS];
  tmap_grid_growth growth;  ///< grid as the plan's largest size has it, then scaled (see above).
} tmap_launch_step;

/// A tiled (cuTensorMapEncodeTiled) or im2col (cuTensorMapEncodeIm2col) tensor map over the
/// pointer `source`; dtype is a CUtensorMapDataType, swizzle_bytes 32, 64 or 128.
typedef struct {
  tmap_arg source;
  int dtype;
  int rank;
  unsigned long long dims[5];
  unsigned long long strides[4];
  unsigned box[5];
  int swizzle_bytes;
  int im2col;
  int lower[3], upper[3];
  unsigned traversal[5];
  /// In a plan for a range of sizes: dims[grow_dim] = size x grow_per_size; grow_per_size 0: fixed.
  int grow_dim;
  unsigned long long grow_per_size;
} tmap_tensor_map_spec;

/// The launches of one kernel. A plan for a range of sizes (size_lo > 0) takes the size at each
/// call, from size_lo to size_hi: its grids and tensor maps follow it (tmap_grid_growth,
/// grow_dim), its kernels read it (TMAP_SLOT_SIZE), and its workspace fits the largest.
typedef struct {
  long long workspace_bytes;  ///< 0: none.
  int workspace_slot;         ///< The slot the workspace pointer goes in.
  int num_steps;
  tmap_launch_step steps[TMAP_PLAN_MAX_STEPS];
  int num_maps;
  tmap_tensor_map_spec maps[TMAP_PLAN_MAX_MAPS];
  long long size_lo, size_hi;  ///< 0, 0: one shape, and every call passes size 0.
  /// Bytes of the workspace from zeroed_offset that must be zero before the plan's first launch
  /// on that workspace; its launches leave them zero (split-K tile counters). 0: none.
  long long zeroed_offset, zeroed_bytes;
} tmap_launch_plan;

/// An encoded CUtensorMap (128 bytes, 64-byte aligned), passed by value as a kernel parameter.
typedef struct {
  alignas(64) unsigned long long opaque[16];
} tmap_tensor_map;

/// What one device answers once: compute capability and blocks resident at once.
typedef struct {
  int major;            ///< < 0: not asked yet.
  long long resident;   ///< 0: not asked yet.
} tmap_launch_cache;

/// Allows every step its dynamic shared memory (above the 48 KiB default).
cudaError_t tmap_plan_prepare(const tmap_launch_plan* plan, const void* const* kernels);
/// Whether `size` is one the plan takes: 0 for a plan of one shape, else size_lo to size_hi.
int tmap_plan_takes_size(const tmap_launch_plan* plan, long long size);
/// Encodes the plan's tensor maps over the caller's pointers, at `size`. cudaErrorNotSupported:
/// the driver lacks the entry point (TMA needs a CUDA 12 driver); cudaErrorInvalidValue: the
/// driver refused a map, or the plan does not take `size`.
cudaError_t tmap_plan_encode_maps(const tmap_launch_plan* plan, void* const* slots, long long size,
                                  tmap_tensor_map* maps);
/// Enqueues the plan's launches at `size` on `stream` (maps encoded at the same size);
/// `cache` (may be null) keeps device answers. cudaErrorInvalidValue: the plan does not take `size`.
cudaError_t tmap_plan_enqueue(const tmap_launch_plan* plan, const void* const* kernels, void* const* slots,
                              const tmap_tensor_map* maps, long long size, tmap_launch_cache* cache,
                              cudaStream_t stream);
/// All of it for one call at `size`: the workspace allocated (and freed) on the stream into
/// slots[workspace_slot], its zeroed bytes cleared, shared memory allowed, maps encoded, launches
/// enqueued.
cudaError_t tmap_plan_launch(const tmap_launch_plan* plan, const void* const* kernels, void** slots, long long size,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
