// tmap_bench's view of fused epilogues (benchmarks/epilogue_forms.h): where operands lie against
// the output, the bias-activation form cuDNN's and cuBLASLt's fused calls take, and the unfused
// sequence's kernels, which must compile for every form the tables use.
#include <gtest/gtest.h>

#include "epilogue_forms.h"
#include "test_util.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

using testing::fused_op;

const std::vector<std::string> kConv = {"N=2", "C=32", "H=8", "W=8", "K=64", "R=3", "S=3", "pad=1"};

Compute conv_with(const std::string& body) {
  return fused_op("conv2d_nhwc", "float16", "Y[n, p, q, 64*g + k] = " + body, kConv);
}

TEST(BenchEpilogue, OperandsAreSeenAsStridesOfTheOutput) {
  const Compute c = conv_with("relu(Out[n, p, q, 64*g + k] + bias[64*g + k] + residual[n, p, q, 64*g + k])");
  std::string why;
  const auto v = bench::epilogue_view(c, why);
  ASSERT_TRUE(v) << why;
  EXPECT_EQ(v->out_shape, (std::vector<std::int64_t>{2, 8, 8, 64}));
  ASSERT_EQ(v->operands.size(), 2u);
  EXPECT_EQ(v->operands[0].stride, (std::vector<std::int64_t>{0, 0, 0, 1}));
  EXPECT_FALSE(v->operands[0].full);
  EXPECT_TRUE(v->only_along(0, 3));
  EXPECT_FALSE(v->only_along(0, 2));
  EXPECT_EQ(v->operands[1].stride, (std::vector<std::int64_t>{4096, 512, 64, 1}));
  EXPECT_TRUE(v->operands[1].full);
  EXPECT_TRUE(v->like_output(1));
  EXPECT_FALSE(v->like_output(0));
}

TEST(BenchEpilogue, BiasActivationFormsAreRecognised) {
  std::string why;
  {  // conv + folded BatchNorm + residual + ReLU
    const Compute c =
        conv_with("relu(Out[n, p, q, 64*g + k] * s[64*g + k] + b[64*g + k] + r[n, p, q, 64*g + k])");
    const auto f = bench::bias_act_form(c, *bench::epilogue_view(c, why), 3);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->act, EpiOp::kRelu);
    EXPECT_EQ(f->scale, 0);
    EXPECT_EQ(f->bias, 1);
    EXPECT_EQ(f->residual, 2);
  }
  {  // GEMM + alpha + bias + GELU (tanh), the bias along n
    const Compute c = fused_op("gemm", "float16", "Y[m, n] = gelu_tanh(0.5 * C[m, n] + bias[n])", {"M=64", "N=96", "K=32"});
    const auto f = bench::bias_act_form(c, *bench::epilogue_view(c, why), 1);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->act, EpiOp::kGeluTanh);
    EXPECT_DOUBLE_EQ(f->alpha, 0.5);
    EXPECT_EQ(f->bias, 0);
    EXPECT_EQ(f->residual, -1);
    EXPECT_FALSE(bench::bias_act_form(c, *bench::epilogue_view(c, why), 0)) << "a bias along m is no row bias";
  }
  for (const char* body : {"silu(C[m, n]) * up[m, n]", "relu(C[m, n]) + bias[n]", "C[m, n] * C[m, n]",
                           "relu(C[m, n] + b1[n] + b2[n])"}) {
    const Compute c = fused_op("gemm", "float16", std::string("Y[m, n] = ") + body, {"M=64", "N=96", "K=32"});
    EXPECT_FALSE(bench::bias_act_form(c, *bench::epilogue_view(c, why), 1)) << body;
  }
}

TEST(BenchEpilogue, UnfusedSequenceHasAKernelPerOperationAndCompiles) {
  struct Case {
    Compute c;
    std::vector<std::vector<int>> inputs;  // per pass: -1 the contraction, else a pass
  };
  const std::vector<Case> cases = {
      // BatchNorm (scale and bias: one kernel), the residual add, the ReLU.
      {conv_with("relu(Out[n, p, q, 64*g + k] * s[64*g + k] + b[64*g + k] + r[n, p, q, 64*g + k])"),
       {{-1}, {0}, {1}}},
      {conv_with("relu(Out[n, p, q, 64*g + k] + bias[64*g + k])"), {{-1}, {0}}},
      {conv_with("clamp(Out[n, p, q, 64*g + k], 0, 6)"), {{-1}}},
      // SiLU gate: the activation, then the product with the other projection.
      {fused_op("gemm", "float16", "Y[m, n] = silu(C[m, n]) * up[m, n]", {"M=64", "N=96", "K=32"}), {{-1}, {0}}},
      {fused_op("gemm", "float32", "Y[m, n] = gelu(C[m, n] + bias[n]) - leaky_relu(C[m, n], 0.1) / alpha[0]",
                {"M=64", "N=96", "K=32"}),
       {{-1}, {0}, {-1}, {2}, {1, 3}}},
  };
  NvrtcCompiler compiler(90);
  for (const Case& k : cases) {
    std::string why;
    const auto v = bench::epilogue_view(k.c, why);
    ASSERT_TRUE(v) << why;
    std::vector<std::vector<int>> inputs;
    const std::string source = bench::unfused_source(k.c, *v, inputs);
    EXPECT_EQ(inputs, k.inputs) << k.c.epilogue_text();
    const CompileResult bin = compiler.compile(source, "unfused");
    EXPECT_TRUE(bin.ok) << bin.log << "\n" << source;
  }
}

}  // namespace
}  // namespace tmap
