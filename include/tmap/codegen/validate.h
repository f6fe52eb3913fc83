// Schedules through their family: validation, threads, shared memory and a default schedule.
// The common checks (every knob's range, the tiling, the grid, vectors) are here; each family
// adds its own (EmitterFamily::validate). An invalid schedule is data with reasons, never
// compiled.
#pragma once

#include <cstdint>
#include <vector>

#include "tmap/gemm/implicit_gemm.h"
#include "tmap/schedule/schedule.h"

namespace tmap {

/// Every reason the schedule is invalid for this GEMM on this device (empty when valid): the
/// checks common to every family, then the family's own (EmitterFamily::validate). With
/// p.relayout, `g` is checked through its relayout view (gemm_for()).
std::vector<ScheduleIssue> validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits);

/// Steps of the reduction an output tile takes, all splits together: block_k-wide steps of K for
/// each serial iteration (a grouped or windowed reduction's outer loop).
std::int64_t reduction_steps(const ImplicitGemm& g, const ScheduleParams& p);

/// Threads per block: warp tiles per block x the family's threads per warp tile.
int block_threads(const ImplicitGemm& g, const ScheduleParams& p);

/// Shared memory the kernel uses, in bytes (the family's layout: padding, panels, swizzle).
std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p);

/// `p` with as many stages as shared memory holds where it holds fewer than `p.stages` (down to
/// two; validate() judges the rest): a drawn ring too deep for its tiles becomes the deepest
/// that fits, as CUTLASS's "as many stages as fit" does, instead of a refused draw.
void fit_stages(const ImplicitGemm& g, ScheduleParams& p, const DeviceLimits& limits);

/// A sensible schedule for a GEMM (the family's choice of tiles, valid for the device); when the
/// SM count is known and the output tiles would leave SMs idle, the reduction is split until
/// there are about two blocks per SM.
ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits);

}  // namespace tmap
