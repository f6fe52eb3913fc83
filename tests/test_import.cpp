// ONNX import and workload tables: models built in code (tests/models), their unique workloads,
// counts and FLOPs against hand-derived values, what is left out and why, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "cli_util.h"
#include "models/onnx_models.h"
#include "tmap/frontend/onnx_import.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/sanitizers.h"
#include "tmap/tune/tune_log.h"

namespace tmap {
namespace {

using testing::ModelOptions;
using testing::ScratchDir;

std::string save(const ScratchDir& dir, const onnx::ModelProto& m, const std::string& name) {
  const std::string path = dir / name;
  testing::save_model(m, path);
  return path;
}

const TableWorkload* find(const WorkloadTable& t, const std::string& op, const std::string& params) {
  for (const auto& w : t.workloads)
    if (w.op == op && params_text(w) == params) return &w;
  return nullptr;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Import, ResNetStyleUniqueLayersCountsAndFlops) {
  ScratchDir dir("tmap_import_resnet");
  OnnxImportOptions o;
  o.batch = 2;
  o.fuse = false;  // the bare contractions (Import.FusedPatterns covers fusion)
  const WorkloadTable t = import_onnx(save(dir, testing::resnet_style(), "r.onnx"), o);
  ASSERT_EQ(t.workloads.size(), 6u);
  const auto* stem = find(t, "conv2d", "N=2 C=3 H=64 W=64 K=16 R=7 S=7 stride=2 pad=3 dil=1 groups=1");
  ASSERT_NE(stem, nullptr);
  EXPECT_EQ(stem->count, 1);
  EXPECT_DOUBLE_EQ(stem->flops, 2.0 * 2 * 16 * 32 * 32 * 3 * 7 * 7);
  EXPECT_EQ(stem->notes, std::vector<std::string>{"bias add not fused"});
  const auto* c16 = find(t, "conv2d", "N=2 C=16 H=16 W=16 K=16 R=3 S=3 stride=1 pad=1 dil=1 groups=1");
  ASSERT_NE(c16, nullptr);
  EXPECT_EQ(c16->count, 4);
  EXPECT_EQ(c16->nodes.size(), 4u);
  const auto* c32 = find(t, "conv2d", "N=2 C=32 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1 dil=1 groups=1");
  ASSERT_NE(c32, nullptr);
  EXPECT_EQ(c32->count, 3);
  EXPECT_NE(find(t, "conv2d", "N=2 C=16 H=16 W=16 K=32 R=3 S=3 stride=2 pad=1 dil=1 groups=1"), nullptr);
  EXPECT_NE(find(t, "conv2d", "N=2 C=16 H=16 W=16 K=32 R=1 S=1 stride=2 pad=0 dil=1 groups=1"), nullptr);
  const auto* fc = find(t, "gemm_nt", "M=2 N=10 K=32");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->notes, std::vector<std::string>{"bias C not fused"});
  double shares = 0;
  for (const auto& w : t.workloads) shares += t.share(w);
  EXPECT_NEAR(shares, 1.0, 1e-12);
  EXPECT_TRUE(t.unsupported.empty());
  EXPECT_EQ(t.other_ops.at("Relu"), 9);
  EXPECT_EQ(t.other_ops.at("Add"), 4);
  EXPECT_EQ(t.other_ops.at("MaxPool"), 1);
  EXPECT_EQ(t.workloads.front().name, "Conv0");  // model order, named by the first node
}

TEST(Import, MobileNetStyleDepthwiseGroupedAndWhatIsLeftOut) {
  ScratchDir dir("tmap_import_mobilenet");
  OnnxImportOptions o;
  o.batch = 1;
  const std::string path = save(dir, testing::mobilenet_style(), "m.onnx");
  const WorkloadTable t = import_onnx(path, o);
  EXPECT_NE(find(t, "conv2d", "N=1 C=3 H=32 W=32 K=16 R=3 S=3 stride=2 pad=1 dil=1 groups=1"), nullptr);
  EXPECT_NE(find(t, "depthwise_conv2d", "N=1 C=16 H=16 W=16 R=3 S=3 stride=1 pad=1 dil=1"), nullptr);
  EXPECT_NE(find(t, "conv2d", "N=1 C=16 H=16 W=16 K=32 R=1 S=1 stride=1 pad=0 dil=1 groups=1"), nullptr);
  EXPECT_NE(find(t, "conv2d", "N=1 C=32 H=16 W=16 K=32 R=3 S=3 stride=1 pad=1 dil=1 groups=4"), nullptr);
  EXPECT_NE(find(t, "gemm_nt", "M=1 N=10 K=32"), nullptr);
  EXPECT_EQ(t.workloads.size(), 5u);
  ASSERT_EQ(t.unsupported.size(), 2u);
  EXPECT_EQ(t.unsupported[0].op_type, "Conv");
  EXPECT_NE(t.unsupported[0].reason.find("pads (0, 0, 1, 1) are asymmetric"), std::string::npos) << t.unsupported[0].reason;
  EXPECT_EQ(t.unsupported[1].op_type, "ConvTranspose");
  EXPECT_NE(t.unsupported[1].reason.find("not supported yet"), std::string::npos);
  // Channels last: every 2-D convolution as conv2d_nhwc, depthwise ones as groups = C.
  o.channels_last = true;
  const WorkloadTable nhwc = import_onnx(path, o);
  EXPECT_NE(find(nhwc, "conv2d_nhwc", "N=1 C=16 H=16 W=16 K=16 R=3 S=3 stride=1 pad=1 dil=1 groups=16"), nullptr);
  for (const auto& w : nhwc.workloads) EXPECT_TRUE(w.op == "conv2d_nhwc" || w.op == "gemm_nt") << w.op;
}

TEST(Import, BertStyleMatMulBatchedMatMulAndGemm) {
  ScratchDir dir("tmap_import_bert");
  OnnxImportOptions o;
  o.batch = 2;
  o.dims["seq"] = 32;
  o.fuse = false;
  const WorkloadTable t = import_onnx(save(dir, testing::bert_style(), "b.onnx"), o);
  const auto* proj = find(t, "gemm", "M=64 N=64 K=64");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->count, 4);  // Q, K, V and the output projection
  EXPECT_NE(find(t, "batched_gemm", "BATCH=8 M=32 N=32 K=16"), nullptr);  // scores
  EXPECT_NE(find(t, "batched_gemm", "BATCH=8 M=32 N=16 K=32"), nullptr);  // context
  EXPECT_NE(find(t, "gemm", "M=64 N=256 K=64"), nullptr);
  EXPECT_NE(find(t, "gemm", "M=64 N=64 K=256"), nullptr);
  EXPECT_NE(find(t, "gemm_nt", "M=64 N=2 K=64"), nullptr);
  EXPECT_EQ(t.workloads.size(), 6u);
  EXPECT_TRUE(t.unsupported.empty());
  EXPECT_EQ(t.other_ops.at("Softmax"), 1);
}

// A model's strings are bytes: names and operator types with control characters and invalid
// UTF-8 reach the table, its JSON and the terminal only as printable text.
TEST(Import, NamesFromTheModelArePrintable) {
  ScratchDir dir("tmap_import_bytes");
  onnx::ModelProto m = testing::bert_style();
  bool first_matmul = true;
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() == "Softmax") n.set_op_type("Soft\x1b[2Jmax\xff");
    if (n.op_type() == "MatMul" && first_matmul) n.set_name("q\xff\x1b]0;title\x07");
    first_matmul &= n.op_type() != "MatMul";
  }
  OnnxImportOptions o;
  o.batch = 2;
  o.dims["seq"] = 32;
  const WorkloadTable t = import_onnx(save(dir, m, "b.onnx"), o);
  EXPECT_EQ(t.other_ops.count("Soft\\x1B[2Jmax\\xFF"), 1u);
  bool renamed = false;
  for (const auto& w : t.workloads)
    for (const auto& node : w.nodes) renamed |= node == "q\\xFF\\x1B]0;title\\x07";
  EXPECT_TRUE(renamed) << "the renamed projection keeps its name, escaped";
  const std::string json = workload_table_json(t);  // threw on invalid UTF-8 before
  EXPECT_EQ(json.find('\x1b'), std::string::npos);
  std::ofstream(dir / "t.json") << json;
  EXPECT_EQ(load_workload_table(dir / "t.json").other_ops, t.other_ops);
}

/// The workload of node `node`.
const TableWorkload* of_node(const WorkloadTable& t, const std::string& node) {
  for (const auto& w : t.workloads)
    if (std::find(w.nodes.begin(), w.nodes.end(), node) != w.nodes.end()) return &w;
  return nullptr;
}

TEST(Import, FusedPatterns) {
  ScratchDir dir("tmap_import_fused");
  OnnxImportOptions o;
  o.batch = 2;
  const std::string path = save(dir, testing::fused_patterns(), "f.onnx");
  const WorkloadTable t = import_onnx(path, o);
  const std::vector<std::pair<std::string, std::string>> expected = {
      // Conv + BatchNormalization (folded) + Relu; the conv's own bias first.
      {"bn_relu", "Y[n, 16*g + k, p, q] = relu((Out[n, 16*g + k, p, q] + bias[16*g + k]) * scale[16*g + k] + bias_bn[16*g + k])"},
      // Conv + BN + Add (a residual of the output's shape) + Clip(0, 6).
      {"bn_add_clip", "Y[n, 16*g + k, p, q] = clamp(Out[n, 16*g + k, p, q] * scale[16*g + k] + bias[16*g + k] + "
                      "residual[n, 16*g + k, p, q], 0, 6)"},
      {"hardswish", "Y[n, 16*g + k, p, q] = (Out[n, 16*g + k, p, q]) * clamp((Out[n, 16*g + k, p, q]) / 6 + 0.5, 0, 1)"},
      {"leaky", "Y[n, 16*g + k, p, q] = leaky_relu(Out[n, 16*g + k, p, q], 0.100000001)"},
      {"hardsigmoid", "Y[n, 16*g + k, p, q] = clamp(0.2 * (Out[n, 16*g + k, p, q]) + 0.5, 0, 1)"},
      {"silu", "Y[m, n] = silu(C[m, n] + bias[n])"},
      {"gelu_erf", "Y[m, n] = gelu(C[m, n] + bias[n])"},
      {"tanh", "Y[m, n] = tanh(C[m, n])"},
      // Gemm's alpha and beta with its bias C, then a Sigmoid.
      {"gemm_ab", "Y[m, n] = sigmoid(C[m, n] * 0.500000 + 2.000000 * bias[n])"},
      // A per-channel Add of a [1, K, 1, 1] constant.
      {"channel_add", "Y[n, 16*g + k, p, q] = Out[n, 16*g + k, p, q] + bias[16*g + k]"},
  };
  for (const auto& [node, epilogue] : expected) {
    const TableWorkload* w = of_node(t, node);
    ASSERT_NE(w, nullptr) << node;
    EXPECT_EQ(w->epilogue, epilogue) << node;
    EXPECT_TRUE(w->notes.empty()) << node << ": " << w->notes.front();
    // Every fused workload builds, with its epilogue's operands inferred.
    const Compute c = build_table_workload(*w, t.dtype, t.out_dtype, node);
    EXPECT_FALSE(c.epilogue.empty()) << node;
  }
  // Its value read twice (by a Relu and the graph's output): nothing fused, the Relu outside.
  const TableWorkload* shared = of_node(t, "shared");
  ASSERT_NE(shared, nullptr);
  EXPECT_TRUE(shared->epilogue.empty());
  EXPECT_EQ(t.other_ops.at("Relu"), 1);
  for (const std::string absorbed : {"BatchNormalization", "Erf", "Sigmoid", "Mul", "Clip", "HardSwish", "LeakyRelu",
                                     "HardSigmoid", "Tanh", "Add", "Div"})
    EXPECT_EQ(t.other_ops.count(absorbed), 0u) << absorbed << " left outside a kernel";
  // --no-fuse: the same contractions, bare.
  o.fuse = false;
  const WorkloadTable bare = import_onnx(path, o);
  for (const auto& w : bare.workloads) EXPECT_TRUE(w.epilogue.empty()) << w.name;
  EXPECT_GE(bare.other_ops.at("Relu"), 2);
}

TEST(Import, ConvolutionsOfOtherRanks) {
  ScratchDir dir("tmap_import_nd");
  OnnxImportOptions o;
  o.batch = 2;
  const WorkloadTable t = import_onnx(save(dir, testing::conv_nd(), "c.onnx"), o);
  EXPECT_NE(find(t, "conv1d", "N=2 C=8 W=32 K=16 S=3 stride=1 pad=1 dil=1"), nullptr);
  EXPECT_NE(find(t, "conv3d", "N=2 C=4 D=8 H=16 W=16 K=8 T=3 R=3 S=3 stride=1 pad=1 dil=1"), nullptr);
  ASSERT_EQ(t.unsupported.size(), 1u);
  EXPECT_NE(t.unsupported[0].reason.find("grouped 1-D convolution"), std::string::npos);
}

TEST(Import, SymbolicDimensionsMustBeGiven) {
  ScratchDir dir("tmap_import_dims");
  const std::string bert = save(dir, testing::bert_style(), "b.onnx");
  OnnxImportOptions o;
  std::string e = error_of([&] { import_onnx(bert, o); });
  EXPECT_NE(e.find("symbolic dimensions are unset"), std::string::npos) << e;
  EXPECT_NE(e.find("('batch')"), std::string::npos) << e;
  EXPECT_NE(e.find("('seq')"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch N"), std::string::npos) << e;
  o.batch = 1;
  o.dims["sequence"] = 8;  // a typo
  e = error_of([&] { import_onnx(bert, o); });
  EXPECT_NE(e.find("no symbolic input dimension 'sequence'"), std::string::npos) << e;
  EXPECT_NE(e.find("seq"), std::string::npos) << e;
  // A model with a fixed batch refuses --batch rather than ignoring it.
  ModelOptions fixed;
  fixed.symbolic_batch = false;
  fixed.batch = 4;
  const std::string resnet = save(dir, testing::resnet_style(fixed), "r.onnx");
  OnnxImportOptions b;
  b.batch = 16;
  e = error_of([&] { import_onnx(resnet, b); });
  EXPECT_NE(e.find("fixed batch of 4"), std::string::npos) << e;
  EXPECT_EQ(import_onnx(resnet, {}).workloads.front().params.front(), (std::pair<std::string, std::int64_t>{"N", 4}));
}

TEST(Import, BadFilesAreClearErrors) {
  ScratchDir dir("tmap_import_bad");
  OnnxImportOptions o;
  EXPECT_NE(error_of([&] { import_onnx(dir / "missing.onnx", o); }).find("no such model file"), std::string::npos);
  EXPECT_NE(error_of([&] { import_onnx(dir.str(), o); }).find("is a directory"), std::string::npos);
  std::ofstream(dir / "empty.onnx").close();
  EXPECT_NE(error_of([&] { import_onnx(dir / "empty.onnx", o); }).find("empty"), std::string::npos);
  std::ofstream(dir / "junk.onnx") << "this is not a protobuf \xff\xff\xff\xff";
  EXPECT_NE(error_of([&] { import_onnx(dir / "junk.onnx", o); }).find("not an ONNX model"), std::string::npos);
  // A truncated model.
  std::string bytes;
  testing::resnet_style().SerializeToString(&bytes);
  std::ofstream(dir / "cut.onnx", std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  EXPECT_NE(error_of([&] { import_onnx(dir / "cut.onnx", o); }).find("not an ONNX model"), std::string::npos);
  // A zero stride divides by zero in libonnx's shape inference, which runs in a child process.
  onnx::ModelProto zero = testing::resnet_style();
  for (auto& n : *zero.mutable_graph()->mutable_node())
    for (auto& a : *n.mutable_attribute())
      if (a.name() == "strides") a.set_ints(0, 0);
  o.batch = 1;
  std::string e = error_of([&] { import_onnx(save(dir, zero, "zero.onnx"), o); });
  EXPECT_NE(e.find("ONNX shape inference crashed"), std::string::npos) << e;
  EXPECT_NE(e.find("zero.onnx"), std::string::npos) << e;
  // A node without an output is refused before anything follows it.
  onnx::ModelProto mute = testing::resnet_style();
  mute.mutable_graph()->mutable_node(1)->clear_output();
  e = error_of([&] { import_onnx(save(dir, mute, "mute.onnx"), o); });
  EXPECT_NE(e.find("has no output: not a valid ONNX graph"), std::string::npos) << e;
  EXPECT_EQ(import_onnx(save(dir, testing::resnet_style(), "fine.onnx"), o).workloads.size(), 8u)
      << "the process that read the shapes goes on importing";
}

// Shape inference runs under a cap on the memory it may map: a model that needs more is a clear
// error. A long chain of Relus needs tens of MiB there; a cap of 1 MiB refuses it.
TEST(Import, ShapeInferenceHasAMemoryCap) {
  if (kAddressSanitizer)
    GTEST_SKIP() << "the cap is not enforced under AddressSanitizer (its shadow mappings would starve)";
  ScratchDir dir("tmap_import_memory");
  onnx::ModelProto m = testing::resnet_style();
  onnx::GraphProto* g = m.mutable_graph();
  std::string value = g->node(g->node_size() - 1).output(0);
  for (int i = 0; i < 100000; ++i) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type("Relu");
    n->add_input(value);
    value = "chain" + std::to_string(i);
    n->add_output(value);
  }
  OnnxImportOptions o;
  o.batch = 1;
  o.inference_memory = 1 << 20;
  const std::string path = save(dir, m, "long.onnx");
  const std::string e = error_of([&] { import_onnx(path, o); });
  EXPECT_NE(e.find("ONNX shape inference needed more than 1 MiB of memory on this model"), std::string::npos) << e;
  EXPECT_NE(e.find("long.onnx"), std::string::npos) << e;
  o.inference_memory = OnnxImportOptions().inference_memory;
  EXPECT_EQ(import_onnx(path, o).workloads.size(), 8u) << "under the default cap the same model imports";
}

TEST(WorkloadTable, JsonRoundTripAndValidation) {
  ScratchDir dir("tmap_table_json");
  OnnxImportOptions o;
  o.batch = 2;
  o.dims["seq"] = 32;
  o.fuse = false;
  o.dtype = "bfloat16";
  const WorkloadTable t = import_onnx(save(dir, testing::bert_style(), "b.onnx"), o);
  std::ofstream(dir / "t.json") << workload_table_json(t);
  const WorkloadTable back = load_workload_table(dir / "t.json");
  EXPECT_EQ(back.dtype, "bfloat16") << "the inputs' dtype travels with the table";
  const Compute first = build_table_workload(back.workloads[0], back.dtype, back.out_dtype, "first");
  EXPECT_EQ(first.tensor_of(first.inputs[0]).dtype, DType::kBFloat16);
  ASSERT_EQ(back.workloads.size(), t.workloads.size());
  for (std::size_t i = 0; i < t.workloads.size(); ++i) {
    EXPECT_EQ(back.workloads[i].name, t.workloads[i].name);
    EXPECT_EQ(back.workloads[i].op, t.workloads[i].op);
    EXPECT_EQ(back.workloads[i].params, t.workloads[i].params);
    EXPECT_EQ(back.workloads[i].count, t.workloads[i].count);
    EXPECT_DOUBLE_EQ(back.workloads[i].flops, t.workloads[i].flops);
  }
  EXPECT_EQ(back.batch, 2);
  EXPECT_EQ(back.other_ops, t.other_ops);
  auto bad = [&](const std::string& text) {
    std::ofstream(dir / "bad.json") << text;
    return error_of([&] { load_workload_table(dir / "bad.json"); });
  };
  EXPECT_NE(bad(R"({"workloads": []})").find("\"format\""), std::string::npos);
  EXPECT_NE(bad(R"({"format": "tmap-workloads/1", "workloads": []})").find("no workloads"), std::string::npos);
  std::string e = bad(R"({"format": "tmap-workloads/1", "workloads": [{"name": "a", "op": "conv9d"}]})");
  EXPECT_NE(e.find("unknown op 'conv9d'"), std::string::npos) << e;
  EXPECT_NE(e.find("bad.json:1:"), std::string::npos) << e;
  e = bad(R"({"format": "tmap-workloads/1", "workloads": [{"name": "a", "op": "gemm", "params": {"Q": 3}}]})");
  EXPECT_NE(e.find("not a valid gemm"), std::string::npos) << e;
  e = bad(R"({"format": "tmap-workloads/1", "workloads": [{"name": "a", "op": "gemm"}, {"name": "a", "op": "gemv"}]})");
  EXPECT_NE(e.find("appears twice"), std::string::npos) << e;
  e = bad(R"({"format": "tmap-workloads/1", "workloads": [{"name": ")" + std::string(5000, 'w') + R"(", "op": "gemm"}]})");
  EXPECT_NE(e.find("a name of 5000 characters; at most 256 are allowed"), std::string::npos) << e;
  e = bad(R"({"format": "tmap-workloads/1", "dtype": "tfloat32", "workloads": [{"name": "a", "op": "gemm"}]})");
  EXPECT_NE(e.find("tfloat32 is a precision of the Tensor Cores"), std::string::npos) << e;
  EXPECT_NE(e.find("give float32"), std::string::npos) << e;
  e = bad(R"({"format": "tmap-workloads/1", "workloads": [{"name": "a", "op": "gemm", "count": 0}]})");
  EXPECT_NE(e.find("\"count\" must be an integer from 1"), std::string::npos) << e;
}

// The fused tables' workloads, without their epilogues, are the bare table's: the shipped
// H100 log of the bare ResNet-50 convolutions holds a record of each fused one's contraction,
// which tmap tune measures first and tmap_bench falls back to.
TEST(WorkloadTable, FusedWorkloadsContractionsAreInTheBareLog) {
  const std::string root = TMAP_SOURCE_DIR;
  std::set<std::string> logged;
  for (const TuneRecord& r : read_log(root + "/logs/h100_resnet50_b1.jsonl").records) logged.insert(r.workload.key);
  const WorkloadTable t = load_workload_table(root + "/benchmarks/workloads/resnet50_fused_b1_nhwc.json");
  ASSERT_EQ(t.workloads.size(), 25u);
  for (const TableWorkload& w : t.workloads) {
    const Compute fused = build_table_workload(w, t.dtype, t.out_dtype, "table");
    ASSERT_FALSE(fused.epilogue.empty()) << w.name;
    EXPECT_TRUE(logged.count(make_workload(contraction_of(fused)).key)) << w.name;
  }
}

// A parameter given as a range of sizes: the workload's compute takes it at run time (built at
// its largest size), the range and its sizes survive the JSON round trip, each size becomes a
// workload of one shape for the benchmarks, and mistakes are named at their place.
TEST(WorkloadTable, ARangeOfSizesIsAWorkload) {
  ScratchDir dir("tmap_table_range");
  auto load = [&](const std::string& workloads) {
    std::ofstream(dir / "t.json") << R"({"format": "tmap-workloads/1", "dtype": "bfloat16", "workloads": [)" + workloads + "]}";
    return load_workload_table(dir / "t.json");
  };
  const WorkloadTable t = load(R"({"name": "qkv", "op": "gemm_nt", "params": {"M": "1..256", "N": 512, "K": 128},
                                   "sizes": [1, 8, 57, 256]}, {"name": "o", "op": "gemm_nt", "params": {"M": 4}})");
  const TableWorkload& qkv = t.workloads[0];
  ASSERT_TRUE(qkv.ranged());
  EXPECT_FALSE(t.workloads[1].ranged());
  EXPECT_EQ(qkv.range_param, "M");
  EXPECT_EQ(qkv.range_lo, 1);
  EXPECT_EQ(qkv.range_hi(), 256);
  EXPECT_EQ(qkv.sizes, (std::vector<std::int64_t>{1, 8, 57, 256}));
  EXPECT_DOUBLE_EQ(qkv.flops, 2.0 * 256 * 512 * 128) << "a range's FLOPs are its largest size's";
  const Compute c = build_table_workload(qkv, t.dtype, t.out_dtype, "qkv");
  EXPECT_TRUE(c.dynamic.active());
  EXPECT_EQ(c.dynamic.param, "M");
  EXPECT_EQ(c.dynamic.lo, 1);
  EXPECT_EQ(c.dynamic.hi, 256);
  EXPECT_EQ(params_text(qkv), "M=1..256 N=512 K=128");

  std::ofstream(dir / "back.json") << workload_table_json(t);
  const WorkloadTable back = load_workload_table(dir / "back.json");
  EXPECT_EQ(back.workloads[0].range_param, "M");
  EXPECT_EQ(back.workloads[0].range_lo, 1);
  EXPECT_EQ(back.workloads[0].params, qkv.params);
  EXPECT_EQ(back.workloads[0].sizes, qkv.sizes);
  EXPECT_FALSE(back.workloads[1].ranged());

  const std::vector<TableWorkload> at = workloads_at_sizes(qkv, qkv.sizes);
  ASSERT_EQ(at.size(), 4u);
  EXPECT_EQ(at[2].name, "qkv_m57");
  EXPECT_FALSE(at[2].ranged());
  EXPECT_EQ(at[2].params.front(), (std::pair<std::string, std::int64_t>{"M", 57}));
  const Compute c57 = build_table_workload(at[2], t.dtype, t.out_dtype, "qkv_m57");
  EXPECT_FALSE(c57.dynamic.active());
  EXPECT_EQ(make_workload(c57).key, make_workload(compute_at(c, 57)).key) << "the size is the range's shape at 57";
  EXPECT_EQ(workloads_at_sizes(t.workloads[1], {1, 2}).size(), 1u) << "a workload of one shape stays one";

  auto refused = [&](const std::string& workloads) { return error_of([&] { load(workloads); }); };
  std::string e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"M": "0..64"}})");
  EXPECT_NE(e.find("1 <= LO < HI"), std::string::npos) << e;
  EXPECT_NE(e.find("t.json:1:"), std::string::npos) << e;
  e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"M": "64"}})");
  EXPECT_NE(e.find("give an integer without quotes"), std::string::npos) << e;
  e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"M": "1..8", "N": "1..8"}})");
  EXPECT_NE(e.find("a second range of sizes"), std::string::npos) << e;
  e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"K": "1..8"}})");
  EXPECT_NE(e.find("not a valid gemm_nt"), std::string::npos) << "a reduction cannot vary at run time: " << e;
  e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"M": "1..8"}, "sizes": [2, 9]})");
  EXPECT_NE(e.find("an integer of the range 1..8"), std::string::npos) << e;
  e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"M": "1..8"}, "sizes": [4, 2]})");
  EXPECT_NE(e.find("ascending order"), std::string::npos) << e;
  e = refused(R"({"name": "a", "op": "gemm_nt", "params": {"M": 8}, "sizes": [4]})");
  EXPECT_NE(e.find("\"sizes\" without a range"), std::string::npos) << e;
}

TEST(Cli, ImportPrintsTheTableAndWritesJson) {
  ScratchDir dir("tmap_cli_import");
  save(dir, testing::resnet_style(), "r.onnx");
  auto r = testing::tmap("import r.onnx --batch 2", dir.str());
  ASSERT_EQ(r.code, 0) << r.err;
  // Fused by default: a residual block's second convolution takes its Add and ReLU.
  EXPECT_NE(r.out.find("11 contraction node(s) -> 8 unique workload(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused: Y[n, 16*g + k, p, q] = relu(Out[n, 16*g + k, p, q] + bias[16*g + k] + residual[n, 16*g + k, p, q])"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("13 node(s) computed in the workloads' epilogues"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("other nodes (outside any kernel from tmap): Flatten 1, GlobalAveragePool 1, MaxPool 1"), std::string::npos)
      << r.out;
  r = testing::tmap("import r.onnx --batch 2 --no-fuse", dir.str());
  EXPECT_NE(r.out.find("11 contraction node(s) -> 6 unique workload(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("other nodes (outside any kernel from tmap): Add 4"), std::string::npos) << r.out;
  r = testing::tmap("import r.onnx --batch 2 --format json > t.json && tmap import r.onnx --batch 2 --out t2.json >/dev/null"
                    " && cmp t.json t2.json",
                    dir.str());
  ASSERT_EQ(r.code, 0) << r.err;
  const WorkloadTable read = load_workload_table(dir / "t.json");
  ASSERT_EQ(read.workloads.size(), 8u);
  EXPECT_NE(read.workloads[2].epilogue.find("residual"), std::string::npos) << "the epilogue is in the file";
  EXPECT_EQ(read.workloads[2].absorbed.size(), 4u);
  r = testing::tmap("import r.onnx", dir.str());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("give --batch N"), std::string::npos) << r.err;
  r = testing::tmap("import r.onnx --batch 0", dir.str());
  EXPECT_NE(r.code, 0);
  r = testing::tmap("import r.onnx --dim seq=x", dir.str());
  EXPECT_EQ(r.code, 2) << r.err;
  // tune --model reads --dim the same way: a dimension must be positive.
  r = testing::tmap("tune --model r.onnx --batch 1 --dim batch=0 --measure model", dir.str());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("a dimension must be positive"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tmap
