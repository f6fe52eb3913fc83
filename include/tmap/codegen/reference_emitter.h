// The reference kernel of a compute, generated from the IR alone: independent of any mapping,
// intrinsic or schedule. One thread per output element loops over every reduction point and
// accumulates in double (floating types) or 64-bit integers, reading zero out of bounds.
#pragma once

#include "tmap/codegen/emitter.h"

namespace tmap {

/// Its parameters are every tensor of the compute, in Compute::tensors order.
KernelSource emit_reference_kernel(const Compute& c);

/// The C++ type a tensor of this dtype is stored as in generated code ("half", "float", ...).
std::string storage_type(DType t);
/// The CUDA headers of the 16-bit float types, and of the 8-bit ones where a tensor of `c` is
/// stored in one (cuda_fp8.h is left out elsewhere: NVRTC reads it for every kernel that names it).
std::string float_type_includes(const Compute& c);

}  // namespace tmap
