// The built-in op library: every op builds, has the documented parameters and iterators, and
// computes the output sizes an independent formula gives.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tmap/frontend/op_library.h"

namespace tmap {
namespace {

using testing::user_error_of;

std::vector<std::string> names_of(const Compute& c, IterKind kind) {
  std::vector<std::string> out;
  for (const auto& it : c.iters)
    if (it.kind == kind) out.push_back(it.name);
  return out;
}

std::vector<std::string> param_names(const Compute& c) {
  std::vector<std::string> out;
  for (const auto& [name, v] : c.params) out.push_back(name);
  return out;
}

struct OpCase {
  std::string op;
  std::vector<std::string> params;
  std::vector<std::string> spatial;
  std::vector<std::string> reduction;
  std::string statement;
};

TEST(OpLibrary, EveryOpBuildsWithItsDocumentedInterface) {
  const OpCase cases[] = {
      {"gemm", {"M", "N", "K"}, {"m", "n"}, {"k"}, "C[m, n] += A[m, k] * B[k, n]"},
      {"gemm_nt", {"M", "N", "K"}, {"m", "n"}, {"k"}, "C[m, n] += A[m, k] * B[n, k]"},
      {"gemm_tn", {"M", "N", "K"}, {"m", "n"}, {"k"}, "C[m, n] += A[k, m] * B[k, n]"},
      {"gemm_tt", {"M", "N", "K"}, {"m", "n"}, {"k"}, "C[m, n] += A[k, m] * B[n, k]"},
      {"batched_gemm", {"BATCH", "M", "N", "K"}, {"b", "m", "n"}, {"k"}, "C[b, m, n] += A[b, m, k] * B[b, k, n]"},
      {"gemv", {"M", "K"}, {"m"}, {"k"}, "y[m] += A[m, k] * x[k]"},
      {"conv1d", {"N", "C", "W", "K", "S", "stride", "pad", "dil"}, {"n", "k", "q"}, {"c", "s"},
       "Out[n, k, q] += I[n, c, q + s - 1] * Wt[k, c, s]"},
      {"conv2d", {"N", "C", "H", "W", "K", "R", "S", "stride", "pad", "dil", "groups"}, {"n", "g", "k", "p", "q"},
       {"c", "r", "s"}, "Out[n, 128*g + k, p, q] += I[n, 128*g + c, p + r - 1, q + s - 1] * Wt[128*g + k, c, r, s]"},
      {"conv2d_nhwc", {"N", "C", "H", "W", "K", "R", "S", "stride", "pad", "dil", "groups"}, {"n", "p", "q", "g", "k"},
       {"r", "s", "c"}, "Out[n, p, q, 128*g + k] += I[n, p + r - 1, q + s - 1, 128*g + c] * Wt[128*g + k, r, s, c]"},
      {"depthwise_conv2d", {"N", "C", "H", "W", "R", "S", "stride", "pad", "dil"}, {"n", "c", "p", "q"}, {"r", "s"},
       "Out[n, c, p, q] += I[n, c, p + r - 1, q + s - 1] * Wt[c, r, s]"},
      {"conv3d", {"N", "C", "D", "H", "W", "K", "T", "R", "S", "stride", "pad", "dil"}, {"n", "k", "z", "p", "q"},
       {"c", "t", "r", "s"}, "Out[n, k, z, p, q] += I[n, c, z + t - 1, p + r - 1, q + s - 1] * Wt[k, c, t, r, s]"},
  };
  ASSERT_EQ(builtin_op_names().size(), std::size(cases));
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    Compute compute = build_compute(builtin_op(c.op));
    EXPECT_EQ(compute.name, c.op);
    EXPECT_EQ(param_names(compute), c.params);
    EXPECT_EQ(names_of(compute, IterKind::kSpatial), c.spatial);
    EXPECT_EQ(names_of(compute, IterKind::kReduction), c.reduction);
    EXPECT_EQ(compute.statement_text(), c.statement);
    EXPECT_EQ(compute.tensor_of(compute.output).dtype, DType::kFloat32);
    // `tmap ops show` prints a file a user can copy: it reads back to the same compute.
    SourceText copy("copy.json", builtin_op_source(c.op));
    Compute reread = build_compute(parse_compute_json(copy, "copy"));
    EXPECT_EQ(reread.statement_text(), compute.statement_text());
    EXPECT_EQ(reread.tensors, compute.tensors);
  }
  EXPECT_NE(user_error_of([] { builtin_op("conv4d"); }).find("unknown op 'conv4d'"), std::string::npos);
  EXPECT_NE(user_error_of([] { builtin_op("conv4d"); }).find("built-in ops are: gemm, gemm_nt"), std::string::npos);
}

std::int64_t conv_out(std::int64_t in, std::int64_t ker, std::int64_t stride, std::int64_t pad, std::int64_t dil) {
  return (in + 2 * pad - dil * (ker - 1) - 1) / stride + 1;
}

// The 12 ResNet-18 layers of the benchmark table, at three batches, in both layouts.
TEST(OpLibrary, ConvolutionSizesOfResNet18Layers) {
  std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/benchmarks/workloads/resnet18_conv2d.json");
  ASSERT_TRUE(in.good());
  nlohmann::json table = nlohmann::json::parse(in);
  ASSERT_EQ(table["layers"].size(), 12u);
  for (const auto& layer : table["layers"]) {
    for (int batch : {1, 16, 256}) {
      std::vector<std::string> sets = {"N=" + std::to_string(batch)};
      for (const char* key : {"C", "H", "W", "K", "R", "S", "stride", "pad"})
        sets.push_back(std::string(key) + "=" + std::to_string(layer[key].get<int>()));
      sets.push_back("dil=" + std::to_string(layer["dilation"].get<int>()));
      const std::int64_t P = conv_out(layer["H"], layer["R"], layer["stride"], layer["pad"], layer["dilation"]);
      const std::int64_t Q = conv_out(layer["W"], layer["S"], layer["stride"], layer["pad"], layer["dilation"]);
      const std::int64_t K = layer["K"];
      SCOPED_TRACE(layer["name"].get<std::string>() + " batch " + std::to_string(batch));
      Compute nchw = build_compute(builtin_op("conv2d"), parse_param_overrides(sets));
      Compute nhwc = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides(sets));
      EXPECT_EQ(nchw.tensor_of(nchw.output).shape, (std::vector<std::int64_t>{batch, K, P, Q}));
      EXPECT_EQ(nhwc.tensor_of(nhwc.output).shape, (std::vector<std::int64_t>{batch, P, Q, K}));
      EXPECT_EQ(nchw.iteration_points(), nhwc.iteration_points());
    }
  }
}

TEST(OpLibrary, GroupedAndDilatedConvolution) {
  Compute c = build_compute(builtin_op("conv2d"),
                            parse_param_overrides({"C=64", "K=128", "groups=4", "dil=2", "pad=2", "stride=2", "H=15", "W=17"}));
  auto extent = [&](const char* n) { return c.iters[c.find_iterator(n)].extent; };
  EXPECT_EQ(extent("g"), 4);
  EXPECT_EQ(extent("k"), 32);
  EXPECT_EQ(extent("c"), 16);
  EXPECT_EQ(extent("p"), conv_out(15, 3, 2, 2, 2));
  EXPECT_EQ(extent("q"), conv_out(17, 3, 2, 2, 2));
  EXPECT_EQ(c.tensors[1].shape, (std::vector<std::int64_t>{128, 16, 3, 3}));
  EXPECT_EQ(c.statement_text(),
            "Out[n, 32*g + k, p, q] += I[n, 16*g + c, 2*p + 2*r - 2, 2*q + 2*s - 2] * Wt[32*g + k, c, r, s]");
}

TEST(OpLibrary, BadParametersAreUserErrors) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"groups=3"}, "requirement 'C % groups == 0' of compute 'conv2d' does not hold for C=128, groups=3"},
      {{"C=96", "groups=3", "K=128"}, "requirement 'K % groups == 0'"},
      {{"groups=0"}, "requirement 'groups >= 1'"},
      {{"stride=0"}, "requirement 'stride >= 1'"},
      {{"pad=-1"}, "requirement 'pad >= 0'"},
      {{"H=2", "pad=0"}, "dimension 2 of tensor 'Out' is 0"},
      {{"N=100000", "C=1024", "H=64", "W=64"}, "more than 32-bit indexing allows"},
  };
  for (const auto& [sets, message] : cases) {
    SCOPED_TRACE(message);
    std::string err = user_error_of([&, &sets = sets] { build_compute(builtin_op("conv2d"), parse_param_overrides(sets)); });
    EXPECT_NE(err.find(message), std::string::npos) << err;
    EXPECT_EQ(err.rfind("<op:conv2d>:", 0), 0u) << err;
  }
}

}  // namespace
}  // namespace tmap
