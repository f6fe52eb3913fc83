// Code generation's entry point: one implicit-GEMM CUDA kernel per candidate (virtual GEMM +
// schedule), emitted by the family named in the hardware abstraction's "family" key.
//
// A family owns its emitter and its schedule space: the knobs it takes (knobs.def, KnobUse), the
// checks a schedule must pass beyond the common ones, the shared memory it takes, a default
// schedule, and the choices the tuner searches.
// Families shipped: "wmma" (nvcuda::wmma fragments), "mma_sync" (mma.sync.aligned with
// ldmatrix, XOR-swizzled shared memory and cp.async pipelines), "wgmma" (Hopper's
// warpgroup-wide wgmma.mma_async reading 128-byte-swizzled shared tiles through descriptors)
// and "simt" (CUDA-core multiply-adds on register tiles, reductions split across lanes).
// Adding a family is its JSON files, one emitter and its space, registered in
// src/codegen/emitter.cpp; nothing outside src/codegen/ names a family.
#pragma once

#include <array>
#include <span>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tmap/codegen/validate.h"
#include "tmap/gemm/implicit_gemm.h"
#include "tmap/schedule/schedule.h"

namespace tmap {

/// A TMA tensor map (CUtensorMap) the launcher encodes for one operand: a view of the operand's
/// tensor as up to 5 dimensions, innermost first (dimension 0 is contiguous), read in boxes of
/// `box` elements into shared memory swizzled in lines of `swizzle_bytes`, zero outside `dims`.
struct TensorMapSpec {
  int operand = 0;  ///< 0: the tensor passed as the kernel's first argument (A), 1: its second (B), 2: the output.
  DType dtype = DType::kFloat16;
  int rank = 0;
  std::array<std::uint64_t, 5> dims{};     ///< Elements per dimension.
  std::array<std::uint64_t, 4> strides{};  ///< Bytes between consecutive indices of dimensions 1...
  std::array<std::uint32_t, 5> box{};      ///< Elements per box along each dimension.
  /// The swizzle of the box in shared memory (CU_TENSOR_MAP_SWIZZLE_<n>B): 128, 64 or 32 bytes,
  /// box[0] elements making one such line.
  int swizzle_bytes = 128;
  /// An im2col map (cuTensorMapEncodeIm2col) of a channels-last convolution input [N][spatial][C]:
  /// each box is box[1] consecutive output pixels (pixelsPerColumn) of box[0] channels
  /// (channelsPerPixel), the pixels walked through the bounding box [lower, dims + upper) of each
  /// spatial dimension (innermost first, rank - 2 of them) in steps of `traversal`, the filter tap
  /// added by the load's offsets; zero outside the tensor.
  bool im2col = false;
  std::array<int, 3> lower{}, upper{};
  std::array<std::uint32_t, 5> traversal{1, 1, 1, 1, 1};
  /// With a run-time size: dims[grow_dim] = size x grow_per_size at each launch (0: fixed).
  int grow_dim = 0;
  std::uint64_t grow_per_size = 0;
};

/// How a grid follows a run-time size: grid[axis] = ceil(size x per_size / per_block) x times
/// (per_size 0: fixed), as tmap_grid_growth in runtime/launch_plan.h.
struct GridGrowth {
  int axis = 0;
  std::int64_t per_size = 0, per_block = 1, times = 1;
};

/// A generated kernel and how to launch it. Its parameters are, in order: the tensor playing
/// operand A, the tensor playing operand B, the output, and a workspace (device pointers), then
/// one `const __grid_constant__` CUtensorMap per entry of `tensor_maps`.
/// With split-K, the main kernel writes partial sums to the workspace and a second kernel in
/// the same source (reduce_name, parameters: workspace, output) sums them into the output, or
/// the last of a tile's blocks sums them (zeroed_bytes: the tile counters).
/// With a relayout (ScheduleParams::relayout), a prologue kernel in the same source
/// (relayout_name, parameters: the tensors playing A and B, the workspace) first copies the
/// operands channels-last into the workspace, at byte relayout_offset[0] (A) and [1] (B), -1 for
/// an operand read in place; the main kernel then takes those copies as A and B. On sm_90 the main
/// kernel is launched as the prologue's programmatic dependent (it waits in griddepcontrol.wait).
struct KernelSource {
  std::string name;
  std::string code;
  int threads = 0;
  std::int64_t shared_bytes = 0;
  std::array<std::int64_t, 3> grid{1, 1, 1};
  /// A persistent kernel: it takes grid[0] tiles (grid[1] = grid[2] = 1) with a grid stride, so
  /// any block count is correct; launchers start min(grid[0], SMs x resident blocks per SM).
  /// A stream-K one's grid[0] is its steps of all tiles: it cuts them into as many runs as blocks.
  bool persistent = false;
  /// Blocks per thread block cluster along x, fixed by the kernel's __cluster_dims__ (2: a pair
  /// sharing an operand tile, ScheduleParams::cluster 2 or 3; the grid's x is a multiple of it).
  /// A persistent launch starts a multiple of it: as many whole clusters as stay resident.
  int cluster_x = 1;
  std::int64_t workspace_bytes = 0;  ///< 0: no workspace and no reduce kernel.
  /// Bytes of the workspace from zeroed_offset that must be zero before the kernel's first launch
  /// on it, which its launches leave zero again: the split-K tile counters of
  /// ScheduleParams::split_reduce (the main kernel then sums the splits, and no reduce kernel runs).
  std::int64_t zeroed_offset = 0, zeroed_bytes = 0;
  std::string reduce_name;
  std::int64_t reduce_blocks = 0;
  int reduce_threads = 256;
  std::vector<TensorMapSpec> tensor_maps;
  std::string relayout_name;  ///< Empty: no prologue.
  std::int64_t relayout_blocks = 0;
  int relayout_threads = 256;
  std::array<std::int64_t, 2> relayout_offset{-1, -1};
  /// Pointers the main and reduce kernels take after the output: the epilogue's operands, in order.
  int epilogue_operands = 0;
  /// A kernel of a range of sizes [size_lo, size_hi] (ImplicitGemm::dynamic; 0: one shape): the
  /// main and reduce kernels take the size as an int after the epilogue's operands, and their
  /// grids (given above for size_hi) follow it.
  std::int64_t size_lo = 0, size_hi = 0;
  GridGrowth grid_growth, reduce_growth;
};

class EmitterFamily {
 public:
  virtual ~EmitterFamily() = default;
  virtual std::string_view name() const = 0;
  /// A small number naming the family in the cost model's features.
  virtual int ordinal() const = 0;
  /// Emits the kernel; the schedule must be valid (see validate()), else an InternalError.
  virtual KernelSource emit(const ImplicitGemm& g, const ScheduleParams& p) const = 0;
  /// Appends the family's own reasons against `p` (the common checks are done by validate()).
  virtual void validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                        std::vector<ScheduleIssue>& out) const = 0;
  virtual std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) const = 0;
  virtual ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) const = 0;
  /// The knobs the family takes beyond those every family takes (Knob::every_family), with the
  /// values it accepts; validation refuses any other knob at a value but its default.
  virtual std::span<const KnobUse> knob_uses() const { return {}; }
  /// The values the tuner draws for each knob, by name, with their weights (a knob not set keeps
  /// its default); `limits` says what the target has (clusters need sm_90).
  virtual KnobChoices choices(const ImplicitGemm& g, const ScheduleParams& defaults,
                              const DeviceLimits& limits) const = 0;
  /// Threads that execute one warp tile (ScheduleParams::warp_m x warp_n): 32 for warp-scope
  /// intrinsics, 128 for a warpgroup's, k_lanes for SIMT (whose "warp tile" is one thread's).
  virtual int threads_per_warp_tile(const ScheduleParams&) const { return 32; }
  /// The block tiles the tuner draws along m (`axis` 'm') or n for a warp tile of `warp`
  /// elements: by default `warp` times 1, 2, 4, ... up to 2^max_warp_tiles_log2().
  virtual std::vector<int> block_tiles(const ImplicitGemm& g, const ScheduleParams& p, char axis) const;
  /// Threads a block has besides its warp tiles' (a producer warpgroup).
  virtual int extra_threads(const ScheduleParams&) const { return 0; }
  /// A block holds up to 2^this warp tiles along m and along n (the tuner's draws): 4 warps a side
  /// for Tensor Core families, many more single-thread tiles for SIMT.
  virtual int max_warp_tiles_log2() const { return 2; }
  /// The most accumulator fragments (of the intrinsic's m x n) a warp holds before spilling.
  virtual int max_fragments_per_warp(const ImplicitGemm& g) const = 0;
  /// The fraction of the tensor cores' peak a well-fed kernel of this family reaches (analytic model).
  virtual double peak_fraction() const = 0;
};

/// The family of that name, or nullptr.
const EmitterFamily* find_family(std::string_view name);
/// The family of an abstraction; a UserError naming the known families when there is none.
const EmitterFamily& family_of(const HwAbstraction& hw);
/// Names of the families with an emitter, for messages.
std::vector<std::string> family_names();

/// What family `family` declares of `knob` (EmitterFamily::knob_uses), or nullptr where it does
/// not take it.
const KnobUse* find_knob_use(const EmitterFamily& family, std::string_view knob);
/// Every family that declares `knob`, with its declaration, in the order of the families' list.
std::vector<std::pair<const EmitterFamily*, KnobUse>> knob_users(const Knob& knob);
/// The families that take `knob` and their values: "every family", or e.g. "mma_sync 0-1, wgmma 0-3".
std::string knob_takers(const Knob& knob);
/// The knob reference (docs/knobs.md, `tmap knobs`): a Markdown table of every knob with its
/// JSON key, default, range, the families that take it, and what it does.
std::string knob_reference_markdown();

/// The kernel of one candidate, by its abstraction's family (through its relayout view with
/// p.relayout, with the prologue kernel that copies the operands).
KernelSource emit_kernel(const ImplicitGemm& g, const ScheduleParams& p);

}  // namespace tmap
