// ONNX import: the tensor contractions of a model (Conv 1-D/2-D/3-D with groups, strides, pads
// and dilations; Gemm; MatMul, batched or not) as a workload table (workload_table.h). Shapes
// come from ONNX's shape inference after symbolic dimensions are fixed (--batch, --dim); nodes
// that are contractions tmap cannot map are listed with the reason, the others counted by type
// unless a workload's epilogue absorbed them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tmap/frontend/workload_table.h"

namespace tmap {

struct OnnxImportOptions {
  std::int64_t batch = 0;                     ///< > 0: the first dimension of every model input, if symbolic.
  std::map<std::string, std::int64_t> dims;   ///< Symbolic dimensions by name (--dim seq=128).
  bool channels_last = false;                 ///< 2-D convolutions as conv2d_nhwc (the model's math, NHWC tensors).
  std::string dtype;  ///< The inputs' ("": the ops' own, float16).
  std::string out_dtype = "float16";
  /// Fuse what follows a contraction into its epilogue (ir/epilogue.h): a Conv's bias, a folded
  /// BatchNormalization, an Add of a bias or a residual, then one activation (Relu, LeakyRelu,
  /// Clip, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu or its Erf form, x * Sigmoid(x) as SiLU),
  /// each only where the contraction's value has no other consumer.
  bool fuse = true;
  /// Bytes ONNX's shape inference may map beyond what its process inherits (a model that needs
  /// more is refused, not allowed to exhaust the machine). Not enforced under AddressSanitizer,
  /// whose shadow mappings an address-space limit would starve.
  std::uint64_t inference_memory = std::uint64_t{4} << 30;
};

/// Whether this build reads ONNX (libonnx was found when it was configured).
bool onnx_import_available();

/// Reads the model at `path`; a UserError naming the file (or the node) and the fix for a
/// missing, malformed or unsupported model, or for symbolic dimensions left unset.
WorkloadTable import_onnx(const std::string& path, const OnnxImportOptions& o);

}  // namespace tmap
