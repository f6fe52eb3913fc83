// ONNX graphs built in code for the import tests and benchmarks (no downloads): a ResNet-style
// and a real ResNet-50, a MobileNet-style (depthwise, grouped, plus nodes tmap cannot map), a
// BERT-style encoder layer (MatMul, batched MatMul, Gemm), 1-D/3-D convolutions, and the patterns
// an import fuses into epilogues.
#pragma once

#include <cstdint>
#include <string>

#include <onnx/onnx_pb.h>

namespace tmap::testing {

struct ModelOptions {
  bool symbolic_batch = true;  ///< The inputs' first dimension is "batch" (else `batch`).
  std::int64_t batch = 1;
  bool random_weights = true;  ///< Initializers with random values; else weights are graph inputs of fixed shape.
  std::uint64_t seed = 1;
  /// ResNet-50: convolutions without bias, each followed by a BatchNormalization (as a model is
  /// exported without folding them); else each convolution has a bias.
  bool batchnorm = false;
};

/// Stem conv 7x7/2 (3 -> 16) and max-pool, two stages of two basic blocks (16 and 32 channels,
/// the second downsampling with a 1x1/2 projection), global average pool, Gemm to 10 classes.
/// Input [batch, 3, 64, 64].
onnx::ModelProto resnet_style(const ModelOptions& o = {});
/// ResNet-50 v1.5 (bottlenecks [3, 4, 6, 3], stride on the 3x3), input [batch, 3, 224, 224].
onnx::ModelProto resnet50(const ModelOptions& o = {});
/// Conv 3x3/2 (3 -> 16), depthwise 3x3 (16), pointwise 1x1 (16 -> 32), grouped 3x3 (32, group 4),
/// a depthwise 3x3/2 with SAME_UPPER padding (asymmetric: unsupported), a ConvTranspose
/// (unsupported), global pool and Gemm. Input [batch, 3, 32, 32].
onnx::ModelProto mobilenet_style(const ModelOptions& o = {});
/// One encoder layer, hidden 64, 4 heads of 16, FFN 256, inputs [batch, seq, 64] with "seq"
/// symbolic: Q/K/V/output projections (MatMul), attention scores and context (batched MatMul),
/// FFN (MatMul), and a classifier Gemm on the flattened tokens.
onnx::ModelProto bert_style(const ModelOptions& o = {});
/// Conv1d (8 -> 16, k 3) on [batch, 8, 32], a grouped conv1d (unsupported), conv3d (4 -> 8,
/// k 3) on [batch, 4, 8, 16, 16].
onnx::ModelProto conv_nd(const ModelOptions& o = {});

/// What an import fuses into epilogues, each on its own input [batch, 8, 8, 8] (convolutions
/// 8 -> 16, 3x3) or [batch, 32] (Gemm and MatMul 32 -> 32), nodes named after the pattern:
/// Conv+BatchNormalization+Relu, Conv+BN+Add+Clip(0, 6), Conv+HardSwish, Conv+LeakyRelu(0.1),
/// Conv+HardSigmoid, MatMul+Add+x*Sigmoid(x), MatMul+Add+GELU's Erf form, MatMul+Tanh,
/// Gemm(alpha 0.5, beta 2)+Sigmoid, Conv+Add([1, 16, 1, 1]), and a Conv whose value is read twice.
onnx::ModelProto fused_patterns(const ModelOptions& o = {});

/// Writes a model; throws std::runtime_error when it cannot.
void save_model(const onnx::ModelProto& m, const std::string& path);

}  // namespace tmap::testing
