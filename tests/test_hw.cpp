// Hardware abstractions: the shipped WMMA family loads as documented, and every broken file is
// rejected with a message naming the file and the fault.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/hw/hw_abstraction.h"

namespace tmap {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using testing::user_error_of;

const std::string kHwDir = std::string(TMAP_SOURCE_DIR) + "/hw_abstractions";

struct FamilyCase {
  std::string name;
  DType a, d;
  std::vector<std::string> shapes;
  std::vector<std::string> layouts;
  int min_cc;
};

TEST(HwAbstraction, ShipsTheWmmaMmaSyncWgmmaAndSimtFamilies) {
  const std::vector<std::string> all_layouts = {"nnn", "ntn", "tnn", "ttn"};
  const std::vector<std::string> f16_shapes = {"16x16x16", "32x8x16", "8x32x16"};
  const FamilyCase cases[] = {
      {"mma_sync_bf16_fp32", DType::kBFloat16, DType::kFloat32, {"16x8x16"}, all_layouts, 80},
      {"mma_sync_fp16_fp32", DType::kFloat16, DType::kFloat32, {"16x8x16"}, all_layouts, 80},
      {"mma_sync_int8_int32", DType::kInt8, DType::kInt32, {"16x8x32"}, {"ntn"}, 80},
      {"mma_sync_tf32_fp32", DType::kTFloat32, DType::kFloat32, {"16x8x8"}, {"ntn"}, 80},
      {"simt_bf16_fp32", DType::kBFloat16, DType::kFloat32, {"1x1x1"}, all_layouts, 80},
      {"simt_fp16_fp16", DType::kFloat16, DType::kFloat16, {"1x1x2"}, all_layouts, 70},
      {"simt_fp16_fp32", DType::kFloat16, DType::kFloat32, {"1x1x1"}, all_layouts, 70},
      {"simt_fp32_fp32", DType::kFloat32, DType::kFloat32, {"1x1x1"}, all_layouts, 70},
      {"simt_int8_int32", DType::kInt8, DType::kInt32, {"1x1x4"}, all_layouts, 70},
      {"wgmma_bf16_fp32", DType::kBFloat16, DType::kFloat32, {"64x8x16"}, all_layouts, 90},
      {"wgmma_e4m3_fp32", DType::kFloat8E4M3, DType::kFloat32, {"64x8x32"}, {"ntn"}, 90},
      {"wgmma_e5m2_fp32", DType::kFloat8E5M2, DType::kFloat32, {"64x8x32"}, {"ntn"}, 90},
      {"wgmma_fp16_fp32", DType::kFloat16, DType::kFloat32, {"64x8x16"}, all_layouts, 90},
      {"wgmma_int8_int32", DType::kInt8, DType::kInt32, {"64x8x32"}, {"ntn"}, 90},
      {"wgmma_tf32_fp32", DType::kTFloat32, DType::kFloat32, {"64x8x8"}, {"ntn"}, 90},
      {"wmma_bf16_fp32", DType::kBFloat16, DType::kFloat32, f16_shapes, all_layouts, 80},
      {"wmma_fp16_fp16", DType::kFloat16, DType::kFloat16, f16_shapes, all_layouts, 70},
      {"wmma_fp16_fp32", DType::kFloat16, DType::kFloat32, f16_shapes, all_layouts, 70},
      {"wmma_fp64_fp64", DType::kFloat64, DType::kFloat64, {"8x8x4"}, all_layouts, 80},
      {"wmma_int4_int32", DType::kInt4, DType::kInt32, {"8x8x32"}, {"ntn"}, 75},
      {"wmma_int8_int32", DType::kInt8, DType::kInt32, f16_shapes, all_layouts, 72},
      {"wmma_tf32_fp32", DType::kTFloat32, DType::kFloat32, {"16x16x8"}, all_layouts, 80},
  };
  std::vector<HwAbstraction> all = load_hw_directory(kHwDir);
  ASSERT_EQ(all.size(), std::size(cases));
  for (std::size_t i = 0; i < all.size(); ++i) {
    const HwAbstraction& hw = all[i];
    const FamilyCase& c = cases[i];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(hw.name, c.name);
    EXPECT_EQ(hw.family, c.name.substr(0, c.name.rfind('_', c.name.rfind('_') - 1)));
    EXPECT_EQ(hw.scope, hw.family == "wgmma" ? "warpgroup" : hw.family == "simt" ? "thread" : "warp");
    EXPECT_EQ(hw.a_dtype, c.a);
    EXPECT_EQ(hw.b_dtype, c.a);
    EXPECT_EQ(hw.d_dtype, c.d);
    std::vector<std::string> shapes;
    for (const auto& s : hw.shapes) shapes.push_back(s.str());
    EXPECT_EQ(shapes, c.shapes);
    EXPECT_EQ(hw.layouts, c.layouts);
    EXPECT_EQ(hw.min_compute_capability, c.min_cc);
    EXPECT_EQ(hw.axis_names, (std::array<std::string, 3>{"i", "j", "k"}));
    EXPECT_EQ((std::vector<std::string>{hw.a, hw.b, hw.d}), (std::vector<std::string>{"A", "B", "D"}));
    // WMMA: fill, two fragment loads, store; mma.sync and SIMT add the global -> shared copies
    // feeding the fragment (register) loads; wgmma's operands are copied to shared memory by
    // every thread (cp.async) or by the producer warpgroup (TMA), and read there by wgmma, A
    // also through ldmatrix into registers (its register form): 7 nodes, 9 edges.
    const bool wgmma = hw.family == "wgmma";
    const std::size_t nodes = wgmma ? 7 : hw.family == "mma_sync" || hw.family == "simt" ? 6 : 4;
    EXPECT_EQ(hw.memory.size(), nodes);
    EXPECT_EQ(hw.edges.size(), wgmma ? 9 : nodes);
    EXPECT_EQ(to_json(hw)["name"], c.name);
  }
}

/// The text of the shipped fp16 abstraction after one edit.
std::string edited(const std::function<void(ordered_json&)>& edit) {
  std::ifstream in(kHwDir + "/wmma_fp16_fp32.json");
  ordered_json j = ordered_json::parse(in);
  edit(j);
  return j.dump(2);
}

struct BrokenCase {
  std::string name;
  std::function<void(ordered_json&)> edit;
  std::string message;
};

TEST(HwAbstraction, RejectsBrokenFilesWithReasons) {
  const BrokenCase cases[] = {
      {"unknown key", [](ordered_json& j) { j["shapes"] = 1; }, "unknown key \"shapes\" in a hardware abstraction"},
      {"no name", [](ordered_json& j) { j.erase("name"); }, "the hardware abstraction has no \"name\""},
      {"empty family", [](ordered_json& j) { j["family"] = ""; }, "\"family\" of the hardware abstraction must be a non-empty string"},
      {"bad scope", [](ordered_json& j) { j["scope"] = "grid"; }, "\"scope\" of the hardware abstraction is \"grid\""},
      {"bad capability", [](ordered_json& j) { j["min_compute_capability"] = "sm_80"; },
       "\"min_compute_capability\" must be a positive integer"},
      {"assigning expression", [](ordered_json& j) { j["compute"]["expression"] = "D[i, j] = A[i, k] * B[k, j]"; },
       "it must accumulate with '+='"},
      {"three operands", [](ordered_json& j) { j["compute"]["expression"] = "D[i, j] += A[i, k] * B[k, j] * E[i, j]"; },
       "it must multiply exactly two operands"},
      {"compound index", [](ordered_json& j) { j["compute"]["expression"] = "D[i, j] += A[i, k + 1] * B[k, j]"; },
       "index 'k + 1' of A is not a bare iterator"},
      {"not a contraction", [](ordered_json& j) { j["compute"]["expression"] = "D[i, j] += A[i, j] * B[i, j]"; },
       "iterator 'i' must index exactly two of the three operands"},
      {"syntax error in expression", [](ordered_json& j) { j["compute"]["expression"] = "D[i, j] += A[i, k] * B[k, j"; },
       "expected ']' to close the indices of 'B'"},
      {"unknown dtype", [](ordered_json& j) { j["compute"]["dtypes"]["A"] = "fp8"; }, "dtype \"fp8\" of operand A is not supported"},
      {"missing dtype", [](ordered_json& j) { j["compute"]["dtypes"].erase("B"); }, "\"dtypes\" has no \"B\""},
      {"narrow accumulator", [](ordered_json& j) { j["compute"]["dtypes"]["D"] = "int8"; },
       "operand D (int8) cannot accumulate products of the input operands"},
      {"bad shape", [](ordered_json& j) { j["compute"]["shapes"][0] = {16, 16}; }, "a shape must be [m, n, k] with three positive integers"},
      {"zero shape", [](ordered_json& j) { j["compute"]["shapes"][0] = {16, 0, 16}; }, "a shape must be [m, n, k]"},
      {"duplicate shape", [](ordered_json& j) { j["compute"]["shapes"][1] = {16, 16, 16}; }, "shape 16x16x16 is listed twice"},
      {"bad layout", [](ordered_json& j) { j["compute"]["layouts"][0] = "nnx"; }, "a layout key must be three letters 'n' or 't'"},
      {"no layouts", [](ordered_json& j) { j["compute"]["layouts"] = ordered_json::array(); }, "\"layouts\" must be a non-empty array"},
      {"load of output", [](ordered_json& j) { j["memory"][1]["operand"] = "D"; }, "'load_a': a load must read an input operand (A or B)"},
      {"store of input", [](ordered_json& j) { j["memory"][3]["operand"] = "A"; }, "a fill or store must write the accumulator (D)"},
      {"bad memory scope", [](ordered_json& j) { j["memory"][1]["from"] = "texture"; }, "\"from\" of 'load_a' is \"texture\""},
      {"duplicate node", [](ordered_json& j) { j["memory"][2]["name"] = "load_a"; }, "node name 'load_a' is used twice"},
      {"unknown edge node", [](ordered_json& j) { j["edges"][0][0] = "fill_c"; }, "edge names unknown node 'fill_c'"},
      {"cycle", [](ordered_json& j) { j["edges"].push_back({"store_d", "load_a"}); }, "form a cycle"},
      {"load not feeding compute", [](ordered_json& j) { j["edges"].erase(1); }, "has no load of operand A feeding 'mma'"},
      {"store not fed", [](ordered_json& j) { j["edges"].erase(3); }, "has no store of operand D fed by 'mma'"},
      {"fill not feeding", [](ordered_json& j) { j["edges"].erase(0); }, "fill 'fill_d' does not feed 'mma'"},
      {"text after the intrinsic", [](ordered_json& j) { j["compute"]["intrinsic"] = "nvcuda::wmma::mma_sync\n#error x"; },
       "intrinsic \"nvcuda::wmma::mma_sync\\n#error x\" is not the instruction family wmma issues for float16 x float16 "
       "into float32"},
      {"name not an identifier", [](ordered_json& j) { j["name"] = "wmma\n#error x"; },
       "name \"wmma\\n#error x\" is not an identifier"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    SourceText src("broken.json", edited(c.edit));
    std::string err = user_error_of([&] { parse_hw_abstraction(src); });
    EXPECT_NE(err.find(c.message), std::string::npos) << err;
    EXPECT_EQ(err.rfind("broken.json:", 0), 0u) << err;
  }
  SourceText not_json("broken.json", "{\"name\": \"x\",,}");
  EXPECT_NE(user_error_of([&] { parse_hw_abstraction(not_json); }).find("broken.json:1:14: error: invalid JSON"),
            std::string::npos);
}

// Descriptions are free text, shown by `tmap hw` and `tmap ops`: another's control characters
// arrive escaped, lines kept.
TEST(HwAbstraction, DescriptionsOfFilesArePrintable) {
  const HwAbstraction hw = parse_hw_abstraction(
      SourceText("d.json", edited([](ordered_json& j) { j["description"] = "two\nlines \x1b[2J"; })));
  EXPECT_EQ(hw.description, "two\nlines \\x1B[2J");
  ordered_json op = ordered_json::parse(builtin_op_source("gemm"));
  op["description"] = "gemm \x1b]0;title\x07";
  EXPECT_EQ(parse_compute_json(SourceText("op.json", op.dump()), "gemm").description, "gemm \\x1B]0;title\\x07");
}

// A file chooses its instruction among those its family issues; the emitter writes the text. An
// instruction with anything added (here a PTX trap) or another shape is refused at load.
TEST(HwAbstraction, IntrinsicsFollowTheFamilysGrammar) {
  auto parse_edited = [](const std::string& file, const std::function<void(ordered_json&)>& edit) {
    std::ifstream in(kHwDir + "/" + file);
    ordered_json j = ordered_json::parse(in);
    edit(j);
    return user_error_of([&] { parse_hw_abstraction(SourceText("edited.json", j.dump(2))); });
  };
  EXPECT_NE(parse_edited("mma_sync_fp16_fp32.json",
                         [](ordered_json& j) {
                           j["compute"]["intrinsic"] = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0}, {%1};\n\ttrap;\n//";
                         })
                .find("write \"intrinsic\": \"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32\""),
            std::string::npos);
  EXPECT_NE(parse_edited("wgmma_fp16_fp32.json",
                         [](ordered_json& j) { j["compute"]["intrinsic"] = "wgmma.mma_async.sync.aligned.m64nNk32.f32.f16.f16"; })
                .find("is not the instruction family wgmma issues for float16 x float16 into float32"),
            std::string::npos);
  EXPECT_NE(parse_edited("mma_sync_fp16_fp32.json",
                         [](ordered_json& j) {
                           for (const char* op : {"A", "B", "D"}) j["compute"]["dtypes"][op] = "float32";
                         })
                .find("family mma_sync has no instruction that multiplies float32 x float32 into float32"),
            std::string::npos);
  // Shapes too: the emitters are written for the shapes their instruction has (wgmma's m64).
  const std::string m32 = parse_edited("wgmma_bf16_fp32.json", [](ordered_json& j) { j["compute"]["shapes"][0] = {32, 8, 16}; });
  EXPECT_NE(m32.find("shape 32x8x16 is not one family wgmma issues for bfloat16 operands"), std::string::npos) << m32;
  EXPECT_NE(m32.find("its shapes are: [64, 8, 16]"), std::string::npos) << m32;
  EXPECT_NE(parse_edited("wmma_fp16_fp32.json", [](ordered_json& j) { j["compute"]["shapes"][0] = {16, 16, 8}; })
                .find("shape 16x16x8 is not one family wmma issues for float16 operands"),
            std::string::npos);
  for (const HwAbstraction& hw : load_hw_directory(kHwDir)) {
    EXPECT_EQ(hw.compute_intrinsic, family_intrinsic(hw)) << hw.name;
    EXPECT_FALSE(family_intrinsic(hw).empty()) << hw.name;
  }
  EXPECT_EQ(family_intrinsic("mma_sync", DType::kInt8, DType::kInt8, DType::kInt32),
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32");
  EXPECT_EQ(family_intrinsic("wgmma", DType::kTFloat32, DType::kTFloat32, DType::kFloat32),
            "wgmma.mma_async.sync.aligned.m64nNk8.f32.tf32.tf32");
  EXPECT_EQ(family_intrinsic("no_such_family", DType::kFloat16, DType::kFloat16, DType::kFloat32), "");
}

class HwDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tmap_hw_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& file, const std::string& text) { std::ofstream(dir_ / file) << text; }
  fs::path dir_;
};

TEST_F(HwDirectory, UserDirectoriesAddAbstractions) {
  write("my_mma.json", edited([](ordered_json& j) { j["name"] = "my_mma"; }));
  write("notes.txt", "not an abstraction");
  auto all = load_hw_abstractions({dir_.string()});
  EXPECT_EQ(all.size(), load_hw_directory(kHwDir).size() + 1);
  EXPECT_EQ(find_hw(all, "my_mma").source_file, (dir_ / "my_mma.json").string());
}

TEST_F(HwDirectory, DuplicateNamesNameBothFiles) {
  write("copy.json", edited([](ordered_json&) {}));
  std::string err = user_error_of([&] { load_hw_abstractions({dir_.string()}); });
  EXPECT_NE(err.find("hardware abstraction 'wmma_fp16_fp32' is also defined in " + kHwDir + "/wmma_fp16_fp32.json"),
            std::string::npos) << err;
  EXPECT_EQ(err.rfind((dir_ / "copy.json").string(), 0), 0u) << err;
}

TEST_F(HwDirectory, BrokenFileAndMissingDirectory) {
  write("bad.json", edited([](ordered_json& j) { j["name"] = 7; }));
  std::string err = user_error_of([&] { load_hw_directory(dir_.string()); });
  EXPECT_EQ(err.rfind((dir_ / "bad.json").string() + ":2:11: error: \"name\" of the hardware abstraction must be", 0), 0u) << err;
  EXPECT_NE(user_error_of([] { load_hw_directory("/nonexistent/hw"); })
                .find("hardware-abstraction directory '/nonexistent/hw' does not exist"),
            std::string::npos);
  auto all = load_hw_directory(kHwDir);
  EXPECT_NE(user_error_of([&] { find_hw(all, "wmma_fp8"); }).find("unknown hardware abstraction 'wmma_fp8'"),
            std::string::npos);
}

TEST(HwAbstraction, BuiltinDirectoryHonoursTheEnvironment) {
  ::setenv("TMAP_HW_DIR", "/somewhere/else", 1);
  EXPECT_EQ(builtin_hw_directory(), "/somewhere/else");
  ::unsetenv("TMAP_HW_DIR");
  EXPECT_TRUE(fs::is_directory(builtin_hw_directory()));
}

}  // namespace
}  // namespace tmap
