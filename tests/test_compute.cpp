// Compute files: every user error (message and location), extent inference and the IR built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

using testing::build_json;
using testing::parse_def;
using testing::user_error_of;

const char* kGemm = R"({
  "name": "g",
  "compute": "C[m, n] += A[m, k] * B[k, n]",
  "params": {"M": 64, "N": 32, "K": 16},
  "tensors": {
    "A": {"shape": ["M", "K"], "dtype": "float16"},
    "B": {"shape": ["K", "N"], "dtype": "float16"},
    "C": {"shape": ["M", "N"], "dtype": "float32"}
  }
})";

TEST(Compute, BuildsGemm) {
  Compute c = build_json(kGemm);
  EXPECT_EQ(c.name, "g");
  ASSERT_EQ(c.iters.size(), 3u);
  EXPECT_EQ(c.iters[0], (Iterator{"m", 64, IterKind::kSpatial}));
  EXPECT_EQ(c.iters[1], (Iterator{"n", 32, IterKind::kSpatial}));
  EXPECT_EQ(c.iters[2], (Iterator{"k", 16, IterKind::kReduction}));
  EXPECT_EQ(c.statement_text(), "C[m, n] += A[m, k] * B[k, n]");
  EXPECT_EQ(c.iteration_points(), 64 * 32 * 16);
  EXPECT_EQ(c.tensor_of(c.output).name, "C");
  nlohmann::json j = to_json(c);
  EXPECT_EQ(j["tensors"][2]["dtype"], "float32");
  EXPECT_EQ(j["iterators"][2]["kind"], "reduction");
  EXPECT_EQ(j["params"]["K"], 16);
}

TEST(Compute, RoundTripsThroughJson) {
  for (const char* json : {kGemm}) {
    Compute c = build_json(json);
    Compute back = compute_from_json(to_json(c), "test");
    EXPECT_EQ(back.statement_text(), c.statement_text());
    EXPECT_EQ(back.tensors, c.tensors);
    EXPECT_EQ(back.iters, c.iters);
    EXPECT_EQ(back.output, c.output);
    EXPECT_EQ(back.inputs, c.inputs);
    // Parameters come back by name (a JSON object), not in declaration order.
    auto sorted = [](auto v) { std::sort(v.begin(), v.end()); return v; };
    EXPECT_EQ(sorted(back.params), sorted(c.params));
  }
  nlohmann::json broken = to_json(build_json(kGemm));
  broken["inputs"][0]["tensor"] = 9;
  EXPECT_NE(user_error_of([&] { compute_from_json(broken, "log.jsonl:3"); })
                .find("log.jsonl:3: error: malformed compute description: bad tensor index"),
            std::string::npos);
}

TEST(Compute, OverridesParameters) {
  Compute c = build_json(kGemm, {"M=17", "K=65"});
  EXPECT_EQ(c.iters[0].extent, 17);
  EXPECT_EQ(c.iters[2].extent, 65);
  EXPECT_EQ(c.tensors[0].shape, (std::vector<std::int64_t>{17, 65}));
}

TEST(Compute, InfersExtentsThroughCompoundIndicesAndDeclarations) {
  Compute c = build_json(R"({
    "compute": "O[n, k, p] += I[n, c, p*stride + r - pad] * W[k, c, r]",
    "params": {"N": 2, "C": 3, "L": 11, "K": 4, "R": 3, "stride": 2, "pad": 1},
    "tensors": {
      "I": {"shape": ["N", "C", "L"], "dtype": "float16"},
      "W": {"shape": ["K", "C", "R"], "dtype": "float16"},
      "O": {"shape": ["N", "K", "(L + 2*pad - R)/stride + 1"], "dtype": "float32"}
    }
  })");
  std::vector<std::pair<std::string, std::int64_t>> got;
  for (const auto& it : c.iters) got.emplace_back(it.name, it.extent);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, std::int64_t>>{
                     {"n", 2}, {"k", 4}, {"p", 6}, {"c", 3}, {"r", 3}}));
  EXPECT_EQ(c.statement_text(), "O[n, k, p] += I[n, c, 2*p + r - 1] * W[k, c, r]");
  // The input's last index, 2p + r - 1 over p < 6 and r < 3, reaches [-1, 11]: past both ends
  // of L = 11 (the padding); the filter's stays inside.
  EXPECT_EQ(c.index_range(c.inputs[0].indices[2]), (std::pair<std::int64_t, std::int64_t>{-1, 11}));
  EXPECT_EQ(c.index_range(c.inputs[1].indices[2]), (std::pair<std::int64_t, std::int64_t>{0, 2}));
  const Tensor& in = c.tensor_of(c.inputs[0]);
  EXPECT_EQ(std::vector<std::int64_t>({in.stride(0), in.stride(1), in.stride(2)}), (std::vector<std::int64_t>{33, 11, 1}));
}

struct ErrorCase {
  std::string name;
  std::string json;
  std::vector<std::string> sets;
  std::string message;   // expected substring
  std::string location;  // expected "file:line:col" prefix, empty to skip
};

// A two-line template: "compute" on line 2, the tensors on lines 3-5.
std::string file(const std::string& compute, const std::string& a = R"(["M", "K"])",
                 const std::string& b = R"(["K", "N"])", const std::string& c = R"(["M", "N"])",
                 const std::string& c_dtype = "float32", const std::string& extra = "") {
  return "{\"params\": {\"M\": 64, \"N\": 32, \"K\": 16, \"Z\": 0},\n\"compute\": \"" + compute +
         "\",\n\"tensors\": {\"A\": {\"shape\": " + a + ", \"dtype\": \"float16\"},\n\"B\": {\"shape\": " + b +
         ", \"dtype\": \"float16\"},\n\"C\": {\"shape\": " + c + ", \"dtype\": \"" + c_dtype + "\"}}" + extra + "}";
}

const std::string kStmt = "C[m, n] += A[m, k] * B[k, n]";

TEST(Compute, StoresFloatSumsInANarrowerOutput) {
  // Declared: float16 output, float32 sums.
  Compute c = build_json(file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float16",
                              ", \"accumulate\": \"float32\""));
  EXPECT_EQ(c.tensor_of(c.output).dtype, DType::kFloat16);
  EXPECT_EQ(c.accumulate, DType::kFloat32);
  Compute back = compute_from_json(to_json(c), "test");
  EXPECT_EQ(back.accumulate, DType::kFloat32);
  EXPECT_EQ(back.tensors, c.tensors);
  // Without "accumulate" the sums are the output's: the document and the workload key say nothing
  // new, so logs written before the key existed still match.
  Compute plain = build_json(kGemm);
  EXPECT_EQ(plain.accumulate, DType::kFloat32);
  EXPECT_FALSE(to_json(plain).contains("accumulate"));
  EXPECT_EQ(compute_from_json(to_json(plain), "test").accumulate, DType::kFloat32);

  // --out-dtype on a built-in op: the output narrows, the sums stay float32.
  SourceText arg("--out-dtype", "bfloat16");
  ComputeDef def = builtin_op("conv2d_nhwc");
  set_output_dtype(def, DType::kBFloat16, arg.at(0, 8));
  Compute conv = build_compute(def);
  EXPECT_EQ(conv.tensor_of(conv.output).dtype, DType::kBFloat16);
  EXPECT_EQ(conv.accumulate, DType::kFloat32);
  ComputeDef bad = builtin_op("gemm");
  set_output_dtype(bad, DType::kInt8, arg.at(0, 8));
  const std::string err = user_error_of([&] { build_compute(bad); });
  EXPECT_EQ(err.rfind("--out-dtype:1:1: error: output 'C' of dtype int8 cannot store sums accumulated in float32", 0),
            0u)
      << err;
}

// --dtype: the contraction's operands take the dtype; sums move only where they cannot hold the
// products (int32 for integers, float64 for float64), and --out-dtype still narrows the output.
TEST(Compute, InputDtypesSetTheOperandsAndSumsThatHoldThem) {
  auto built = [](const std::string& op, const std::string& in, const std::string& out = "") {
    ComputeDef def = builtin_op(op);
    set_dtypes(def, in, out, "--dtype", "--out-dtype");
    return build_compute(def);
  };
  const Compute bf16 = built("gemm", "bf16");
  EXPECT_EQ(bf16.tensor_of(bf16.inputs[0]).dtype, DType::kBFloat16);
  EXPECT_EQ(bf16.tensor_of(bf16.inputs[1]).dtype, DType::kBFloat16);
  EXPECT_EQ(bf16.tensor_of(bf16.output).dtype, DType::kFloat32) << "float32 sums hold bfloat16 products";
  const Compute int8 = built("conv2d_nhwc", "int8");
  EXPECT_EQ(int8.tensor_of(int8.inputs[0]).dtype, DType::kInt8);
  EXPECT_EQ(int8.tensor_of(int8.output).dtype, DType::kInt32);
  EXPECT_EQ(built("gemm", "float64").tensor_of(built("gemm", "float64").output).dtype, DType::kFloat64);
  const Compute narrow = built("gemm", "bfloat16", "bfloat16");
  EXPECT_EQ(narrow.tensor_of(narrow.output).dtype, DType::kBFloat16);
  EXPECT_EQ(narrow.accumulate, DType::kFloat32);
  const std::string tf32 = user_error_of([&] { built("gemm", "tf32"); });
  EXPECT_EQ(tf32.rfind("--dtype:1:1: error: tfloat32 is a precision of the Tensor Cores", 0), 0u) << tf32;
  EXPECT_NE(tf32.find("give float32"), std::string::npos) << tf32;
  const std::string unknown = user_error_of([&] { built("gemm", "float8"); });
  EXPECT_EQ(unknown.rfind("--dtype:1:1: error: unknown dtype 'float8'", 0), 0u) << unknown;
}

// The output check the tuner runs on every candidate compares the output's bytes as they are:
// the same error as decoding them first, for every output dtype, on outputs large enough to be
// summed on several threads; infinite when one element is NaN (a poisoned output).
TEST(Compute, TheOutputCheckOfBytesIsTheRelativeL2OfTheirValues) {
  const std::size_t n = (std::size_t{5} << 20) + 3;  // several chunks and a ragged end
  std::vector<double> ref(n), got(n);
  for (std::size_t i = 0; i < n; ++i) {
    ref[i] = std::sin(0.001 * double(i)) * 4;
    got[i] = ref[i] * (1 + 0.003 * std::cos(double(i)));
  }
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt8,
                  DType::kFloat8E4M3}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<unsigned char> bytes = encode_values(got, t);
    const double expected = relative_l2(decode_values(bytes, t, n), ref);
    EXPECT_GT(expected, 0);
    EXPECT_NEAR(relative_l2_of_bytes(bytes.data(), t, ref), expected, 1e-12 * expected);
  }
  std::vector<unsigned char> poisoned = encode_values(got, DType::kFloat16);
  poisoned[2 * (n - 1)] = poisoned[2 * (n - 1) + 1] = 0xFF;  // the last element a NaN
  EXPECT_EQ(relative_l2_of_bytes(poisoned.data(), DType::kFloat16, ref), INFINITY);
  EXPECT_EQ(relative_l2_of_bytes(encode_values(ref, DType::kFloat64).data(), DType::kFloat64, ref), 0.0);
}

// 8-bit floats: their names, their values (rounded as the hardware rounds, saturating e4m3 at
// 448), inputs summed in float32 and never an accumulation or output type; the reference kernel
// reads them.
TEST(Compute, Float8InputsAreReadAndNeverStored) {
  EXPECT_EQ(parse_dtype("e4m3"), DType::kFloat8E4M3);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kFloat8E4M3);
  EXPECT_EQ(parse_dtype("fp8_e5m2"), DType::kFloat8E5M2);
  EXPECT_EQ(dtype_name(DType::kFloat8E5M2), "float8_e5m2");
  EXPECT_EQ(dtype_bits(DType::kFloat8E4M3), 8);
  EXPECT_TRUE(dtype_accumulates(DType::kFloat8E4M3, DType::kFloat32));
  EXPECT_FALSE(dtype_accumulates(DType::kFloat8E4M3, DType::kFloat8E5M2));
  EXPECT_FALSE(dtype_accumulates(DType::kFloat16, DType::kFloat8E4M3));
  const std::vector<double> values = {0.1, -1.0, 0.5, 1000.0};
  EXPECT_EQ(decode_values(encode_values(values, DType::kFloat8E4M3), DType::kFloat8E4M3, 4),
            (std::vector<double>{0.1015625, -1.0, 0.5, 448.0}));
  EXPECT_EQ(decode_values(encode_values(values, DType::kFloat8E5M2), DType::kFloat8E5M2, 4),
            (std::vector<double>{0.09375, -1.0, 0.5, 1024.0}));
  ComputeDef def = builtin_op("gemm_nt");
  set_dtypes(def, "e4m3", "bfloat16", "--dtype", "--out-dtype");
  const Compute c = build_compute(def, parse_param_overrides({"M=64", "N=64", "K=64"}));
  EXPECT_EQ(c.tensor_of(c.inputs[1]).dtype, DType::kFloat8E4M3);
  EXPECT_EQ(c.accumulate, DType::kFloat32);
  const KernelSource ref = emit_reference_kernel(c);
  EXPECT_NE(ref.code.find("#include <cuda_fp8.h>"), std::string::npos);
  const CompileResult bin = NvrtcCompiler(90).compile(ref.code, ref.name);
  EXPECT_TRUE(bin.ok) << bin.log;
  ComputeDef stored = builtin_op("gemm_nt");
  const std::string e = user_error_of([&] {
    set_dtypes(stored, "e4m3", "e4m3", "--dtype", "--out-dtype");
    build_compute(stored);
  });
  EXPECT_NE(e.find("tmap's kernels read 8-bit floats but do not store them yet"), std::string::npos) << e;
}

TEST(Compute, EveryUserErrorNamesItsInput) {
  const ErrorCase cases[] = {
      {"invalid json", "{\"compute\": \n  [1, }", {}, "invalid JSON", "test.json:2:"},
      {"not an object", "[1, 2]", {}, "a compute file must hold a JSON object, not array", "test.json:1:1"},
      {"unknown key", R"({"compute": "C[m] += A[m]", "tensor": {}})", {}, "unknown key \"tensor\" in a compute definition",
       "test.json:1:29"},
      {"missing compute", R"({"tensors": {}})", {}, "missing \"compute\"", "test.json:1:1"},
      {"long name", "{\"name\": \"" + std::string(5000, 'x') + "\", \"compute\": \"C[m] += A[m]\", \"tensors\": {}}", {},
       "a name of 5000 characters; at most 256 are allowed", "test.json:1:10"},
      {"terminal escape in the name", R"({"name": "\u001b[2Jx", "compute": "C[m] += A[m]", "tensors": {}})", {},
       "a name with a control character (0x1b at byte 0)", "test.json:1:10"},
      {"missing tensors", R"({"compute": "C[m] += A[m]"})", {}, "missing \"tensors\"", "test.json:1:1"},
      {"param not integer", R"({"params": {"M": "8"}, "compute": "C[m] += A[m]", "tensors": {}})", {},
       "parameter \"M\" must have an integer default, not string", "test.json:1:18"},
      {"bad dtype", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float8"), {},
       "dtype \"float8\" of tensor \"C\" is not supported", "test.json:5:37"},
      {"tf32 storage", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "tfloat32"), {},
       "tfloat32 is a precision of the Tensor Cores, not a storage type (tensor", "test.json:5:37"},
      {"shape not array", file(kStmt, "7"), {}, "the shape of \"A\" must be a non-empty array", "test.json:3:28"},
      {"bad shape expression", file(kStmt, R"(["M", "K +"])"), {}, "expected a name, an integer or '(', found end of text",
       "test.json:3:38"},
      {"unknown tensor", file("C[m, n] += A[m, k] * Bx[k, n]"), {}, "unknown tensor 'Bx'", "test.json:2:34"},
      {"rank mismatch", file("C[m, n] += A[m, k, n] * B[k, n]"), {}, "tensor 'A' has 2 dimensions but is indexed with 3",
       "test.json:2:24"},
      {"tensor twice", file("C[m, n] += A[m, k] * A[k, n]"), {}, "tensor 'A' is used twice", "test.json:2:34"},
      {"unused tensor", file("C[m, n] += A[m, n]"), {}, "tensor 'B' is declared but not used", "test.json:4:1"},
      {"non-affine", file("C[m, n] += A[m, k*n] * B[k, n]"), {}, "non-affine index in index 1 of 'A'", "test.json:2:29"},
      {"extent conflict", file(kStmt, R"(["M", "K"])", R"(["N", "N"])"), {},
       "extent conflict for iterator 'k': dimension 1 of 'A' gives 16 but dimension 0 of 'B' gives 32", "test.json:2:36"},
      {"no extent", file("C[m, n] += A[m, k + j] * B[k, n]"), {}, "iterator 'j' has no extent", "test.json:2:33"},
      {"zero dimension", file(kStmt, R"(["M - 64", "K"])"), {}, "dimension 0 of tensor 'A' is 0 (from 'M - 64' with M=64)",
       "test.json:3:30"},
      {"negative from set", file(kStmt), {"K=-3"}, "dimension 1 of tensor 'A' is -3", "test.json:3:35"},
      {"32-bit overflow", file(kStmt, R"(["M*4096", "K*4096"])"), {},
       "tensor 'A' has 17179869184 elements, more than 32-bit indexing allows", "test.json:3:13"},
      {"division by zero", file(kStmt, R"(["M / Z", "K"])"), {}, "division by zero while evaluating dimension 0",
       "test.json:3:30"},
      {"unknown parameter in shape", file(kStmt, R"(["M2", "K"])"), {}, "unknown parameter 'M2' in dimension 0",
       "test.json:3:30"},
      {"requirement", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float32", ", \"requires\": [\"M % 3 == 0\"]"),
       {}, "requirement 'M % 3 == 0' of compute 'test' does not hold for M=64", "test.json:5:63"},
      {"declared unknown iterator", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float32", ", \"iterators\": {\"x\": 4}"),
       {}, "declared iterator 'x' does not appear in the statement", "test.json:5:64"},
      {"declared conflicting extent", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float32", ", \"iterators\": {\"k\": 4}"),
       {}, "extent conflict for iterator 'k'", "test.json:5:64"},
      {"assign with reduction", file("C[m, n] = A[m, k] * B[k, n]"), {}, "iterator 'k' does not index the output",
       "test.json:2:28"},
      {"dimension beyond 64 bits", file(kStmt, R"([9223372036854775808, "K"])"), {},
       "dimension 0 of \"A\" is beyond 64-bit integers", "test.json:3:"},
      {"index beyond 32 bits", file("C[m, n] += A[m, 1000000000*k] * B[k, n]"), {},
       "the indices of 'A' reach offsets of 15000001008 elements, more than 32-bit indexing allows", "test.json:2:24"},
      {"output out of bounds", file("C[m + 1, n] += A[m, k] * B[k, n]"), {},
       "index 0 of output 'C' ranges over [1, 64], outside its dimension [0, 63]", "test.json:2:15"},
      {"output not fully written", file("C[2*m, n] += A[m, k] * B[k, n]", R"(["M", "K"])", R"(["K", "N"])", R"(["2*M", "N"])"), {},
       "output 'C' has 4096 elements but its indices reach only 2048", "test.json:2:13"},
      {"output written twice", file("C[m, m + n] += A[m, k] * B[k, n]", R"(["M", "K"])", R"(["K", "N"])", R"(["M", "M + N"])"), {},
       "iterator 'm' indexes two dimensions of output 'C'", "test.json:2:18"},
      {"output overlapping", file("C[m + k2, n] += A[m, k] * B[k, n, k2]", R"(["M", "K"])", R"(["K", "N", "2"])",
                                  R"(["M + 1", "N"])"),
       {}, "writes some elements more than once", "test.json:2:15"},
      {"narrow accumulator", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "int8"), {},
       "products of 'A' (float16) cannot be accumulated in int8 (the dtype of output 'C')", "test.json:5:37"},
      {"accumulate not a dtype", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float16",
                                      ", \"accumulate\": \"float8\""),
       {}, "accumulation dtype \"float8\" is not supported", "test.json:5:64"},
      {"accumulate too narrow", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "float16",
                                     ", \"accumulate\": \"int32\""),
       {}, "products of 'A' (float16) cannot be accumulated in int32", "test.json:5:64"},
      {"integer output of float sums", file(kStmt, R"(["M", "K"])", R"(["K", "N"])", R"(["M", "N"])", "int32",
                                            ", \"accumulate\": \"float32\""),
       {}, "output 'C' of dtype int32 cannot store sums accumulated in float32", "test.json:5:37"},
      {"set unknown", file(kStmt), {"Q=3"}, "unknown parameter 'Q' of compute 'test'", "--set:1:1"},
      {"set malformed", file(kStmt), {"M:3"}, "--set expects NAME=VALUE, got 'M:3'", "--set:1:1"},
      {"set not integer", file(kStmt), {"M=3.5"}, "the value of parameter 'M' must be an integer or a range LO..HI, got '3.5'", "--set:1:3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name + ": " + c.json);
    std::string err = user_error_of([&] { build_json(c.json, c.sets); });
    EXPECT_NE(err.find(c.message), std::string::npos) << err;
    if (!c.location.empty()) EXPECT_EQ(err.rfind(c.location, 0), 0u) << err;
  }
}

TEST(Compute, ErrorsShowTheLineAndACaret) {
  std::string err = user_error_of([&] { build_json(file("C[m, n] += A[m, k] * Bx[k, n]")); });
  EXPECT_NE(err.find("\"compute\": \"C[m, n] += A[m, k] * Bx[k, n]\",\n"), std::string::npos) << err;
  EXPECT_NE(err.find("^~\n  hint: declared tensors are: A, B, C"), std::string::npos) << err;
}

/// A kernel passes every tensor as a pointer: a product of 16 inputs is refused by name, 15 are fine.
TEST(Compute, AStatementTakesAtMostSixteenTensors) {
  auto statement = [](int inputs) {
    std::string product, tensors = R"("O": {"shape": [4], "dtype": "float32"})";
    for (int i = 0; i < inputs; ++i) {
      product += (i ? " * T" : "T") + std::to_string(i) + "[i]";
      tensors += ", \"T" + std::to_string(i) + R"(": {"shape": [4], "dtype": "float32"})";
    }
    return R"({"name": "wide", "compute": "O[i] += )" + product + R"(", "tensors": {)" + tensors + "}}";
  };
  EXPECT_EQ(build_json(statement(Compute::kMaxTensors - 1)).inputs.size(), 15u);
  const std::string err = user_error_of([&] { build_json(statement(Compute::kMaxTensors)); });
  EXPECT_NE(err.find("the statement takes 17 tensors; at most 16 (the output and 15 inputs) are supported"),
            std::string::npos) << err;
  EXPECT_NE(err.find("T15[i]"), std::string::npos) << "points at the first tensor too many: " << err;
}

TEST(Compute, ReadsFilesAndNamesMissingOnes) {
  std::string err = user_error_of([] { load_compute_file("/nonexistent/x.json"); });
  EXPECT_NE(err.find("compute file '/nonexistent/x.json' does not exist"), std::string::npos) << err;
  ComputeDef def = load_compute_file(std::string(TMAP_SOURCE_DIR) + "/tests/data/conv1d_stride2.json");
  EXPECT_EQ(def.name, "conv1d_stride2");
  Compute c = build_compute(def);
  EXPECT_EQ(c.tensor_of(c.output).shape, (std::vector<std::int64_t>{1, 32, 50}));
}

}  // namespace
}  // namespace tmap
