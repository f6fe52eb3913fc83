// The built-in op library: gemm (all operand transpositions), batched gemm, gemv, conv1d,
// conv2d (NCHW/KCRS and NHWC/KRSC, with stride, padding, dilation and groups), depthwise
// conv2d and conv3d. Each op is a compute definition written in the same JSON language as a
// user's file (see compute_loader.h), so `tmap ops show NAME` prints a file a user can copy.
#pragma once

#include <string>
#include <vector>

#include "tmap/frontend/compute_loader.h"

namespace tmap {

/// Names of the built-in ops, in library order.
std::vector<std::string> builtin_op_names();
/// The JSON source of a built-in op; a UserError listing the names if there is none.
const std::string& builtin_op_source(const std::string& name);
/// The parsed definition of a built-in op (its file name is "<op:NAME>").
ComputeDef builtin_op(const std::string& name);

}  // namespace tmap
