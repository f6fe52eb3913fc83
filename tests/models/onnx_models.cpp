#include "onnx_models.h"

#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

namespace tmap::testing {
namespace {

using Ints = std::vector<std::int64_t>;

class GraphBuilder {
 public:
  GraphBuilder(const std::string& name, const ModelOptions& o) : o_(o), rng_(o.seed) {
    m_.set_ir_version(8);
    m_.set_producer_name("tmap tests");
    m_.add_opset_import()->set_version(13);
    m_.mutable_graph()->set_name(name);
  }

  /// A model input; -1 in `dims` is the symbolic dimension named by `params` in turn.
  std::string input(const std::string& name, const Ints& dims, std::vector<std::string> params = {}) {
    auto* v = m_.mutable_graph()->add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = t->mutable_shape();
    std::size_t next = 0;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      auto* d = shape->add_dim();
      if (i == 0 && o_.symbolic_batch) d->set_dim_param("batch");
      else if (i == 0) d->set_dim_value(o_.batch);
      else if (dims[i] < 0) d->set_dim_param(params.at(next++));
      else d->set_dim_value(dims[i]);
    }
    return name;
  }

  /// A weight: a random initializer, or a graph input of that shape.
  std::string weight(const Ints& dims) {
    const std::string name = "w" + std::to_string(weights_++);
    if (!o_.random_weights) {
      auto* v = m_.mutable_graph()->add_input();
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(onnx::TensorProto::FLOAT);
      for (std::int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
      return name;
    }
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    std::int64_t n = 1;
    for (std::int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    std::normal_distribution<float> normal(0.f, 0.05f);
    for (std::int64_t i = 0; i < n; ++i) t->add_float_data(normal(rng_));
    return name;
  }

  std::string ints_constant(const Ints& values) {
    const std::string name = "c" + std::to_string(weights_++);
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (std::int64_t v : values) t->add_int64_data(v);
    return name;
  }

  onnx::NodeProto* node(const std::string& type, const std::vector<std::string>& inputs) {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(type + std::to_string(nodes_));
    for (const auto& i : inputs) n->add_input(i);
    n->add_output("t" + std::to_string(nodes_++));
    return n;
  }
  static void attr(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const Ints& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (std::int64_t x : v) a->add_ints(x);
  }
  static void attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }

  /// Conv with C -> K channels over a `rank`-D input; kernel k, one stride, one padding.
  std::string conv(const std::string& x, std::int64_t C, std::int64_t K, int rank, std::int64_t k, std::int64_t stride,
                   std::int64_t pad, std::int64_t group = 1, bool bias = true) {
    Ints w = {K, C / group};
    for (int i = 0; i < rank; ++i) w.push_back(k);
    std::vector<std::string> in = {x, weight(w)};
    if (bias) in.push_back(weight({K}));
    auto* n = node("Conv", in);
    attr(n, "strides", Ints(rank, stride));
    attr(n, "pads", Ints(2 * rank, pad));
    if (group != 1) attr(n, "group", group);
    return n->output(0);
  }
  std::string op(const std::string& type, const std::vector<std::string>& in) { return node(type, in)->output(0); }
  /// A one-element float initializer.
  std::string scalar(float v) {
    const std::string name = "s" + std::to_string(weights_++);
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
    return name;
  }
  static void real_attr(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  /// Renames the node that writes `value`.
  void name_producer(const std::string& value, const std::string& name) {
    for (auto& n : *m_.mutable_graph()->mutable_node())
      if (n.output_size() > 0 && n.output(0) == value) n.set_name(name);
  }
  std::string maxpool(const std::string& x, std::int64_t k, std::int64_t s, std::int64_t p) {
    auto* n = node("MaxPool", {x});
    attr(n, "kernel_shape", Ints{k, k});
    attr(n, "strides", Ints{s, s});
    attr(n, "pads", Ints{p, p, p, p});
    return n->output(0);
  }
  std::string gemm(const std::string& x, std::int64_t K, std::int64_t N) {
    auto* n = node("Gemm", {x, weight({N, K}), weight({N})});
    attr(n, "transB", 1);
    return n->output(0);
  }
  std::string transpose(const std::string& x, const Ints& perm) {
    auto* n = node("Transpose", {x});
    attr(n, "perm", perm);
    return n->output(0);
  }
  std::string reshape(const std::string& x, const Ints& shape) { return op("Reshape", {x, ints_constant(shape)}); }
  std::string flatten(const std::string& x) {
    auto* n = node("Flatten", {x});
    attr(n, "axis", 1);
    return n->output(0);
  }
  void output(const std::string& name) {
    auto* v = m_.mutable_graph()->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  onnx::ModelProto& model() { return m_; }

 private:
  ModelOptions o_;
  onnx::ModelProto m_;
  std::mt19937 rng_;
  int weights_ = 0, nodes_ = 0;
};

std::string basic_block(GraphBuilder& b, const std::string& x, std::int64_t C, std::int64_t K, std::int64_t stride) {
  std::string y = b.op("Relu", {b.conv(x, C, K, 2, 3, stride, 1)});
  y = b.conv(y, K, K, 2, 3, 1, 1);
  const std::string skip = stride != 1 || C != K ? b.conv(x, C, K, 2, 1, stride, 0) : x;
  return b.op("Relu", {b.op("Add", {y, skip})});
}

/// A 2-D convolution with a bias, or without one and followed by a BatchNormalization.
std::string conv_bn(GraphBuilder& b, bool batchnorm, const std::string& x, std::int64_t C, std::int64_t K, std::int64_t k,
                    std::int64_t stride, std::int64_t pad) {
  const std::string y = b.conv(x, C, K, 2, k, stride, pad, 1, !batchnorm);
  return batchnorm ? b.op("BatchNormalization", {y, b.weight({K}), b.weight({K}), b.weight({K}), b.weight({K})}) : y;
}

std::string bottleneck(GraphBuilder& b, bool bn, const std::string& x, std::int64_t C, std::int64_t width,
                       std::int64_t stride) {
  const std::int64_t K = 4 * width;
  std::string y = b.op("Relu", {conv_bn(b, bn, x, C, width, 1, 1, 0)});
  y = b.op("Relu", {conv_bn(b, bn, y, width, width, 3, stride, 1)});
  y = conv_bn(b, bn, y, width, K, 1, 1, 0);
  const std::string skip = stride != 1 || C != K ? conv_bn(b, bn, x, C, K, 1, stride, 0) : x;
  return b.op("Relu", {b.op("Add", {y, skip})});
}

}  // namespace

onnx::ModelProto resnet_style(const ModelOptions& o) {
  GraphBuilder b("resnet_style", o);
  std::string x = b.input("image", {-1, 3, 64, 64});
  x = b.maxpool(b.op("Relu", {b.conv(x, 3, 16, 2, 7, 2, 3)}), 3, 2, 1);
  x = basic_block(b, x, 16, 16, 1);
  x = basic_block(b, x, 16, 16, 1);
  x = basic_block(b, x, 16, 32, 2);
  x = basic_block(b, x, 32, 32, 1);
  x = b.flatten(b.op("GlobalAveragePool", {x}));
  b.output(b.gemm(x, 32, 10));
  return b.model();
}

onnx::ModelProto resnet50(const ModelOptions& o) {
  GraphBuilder b("resnet50", o);
  std::string x = b.input("image", {-1, 3, 224, 224});
  x = b.maxpool(b.op("Relu", {conv_bn(b, o.batchnorm, x, 3, 64, 7, 2, 3)}), 3, 2, 1);
  std::int64_t C = 64;
  const int blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = 64 << stage;
    for (int i = 0; i < blocks[stage]; ++i) {
      x = bottleneck(b, o.batchnorm, x, C, width, i == 0 && stage > 0 ? 2 : 1);
      C = 4 * width;
    }
  }
  x = b.flatten(b.op("GlobalAveragePool", {x}));
  b.output(b.gemm(x, 2048, 1000));
  return b.model();
}

onnx::ModelProto mobilenet_style(const ModelOptions& o) {
  GraphBuilder b("mobilenet_style", o);
  std::string x = b.input("image", {-1, 3, 32, 32});
  x = b.op("Relu", {b.conv(x, 3, 16, 2, 3, 2, 1)});           // [16, 16, 16]
  x = b.op("Relu", {b.conv(x, 16, 16, 2, 3, 1, 1, 16)});      // depthwise
  x = b.op("Relu", {b.conv(x, 16, 32, 2, 1, 1, 0)});          // pointwise
  x = b.op("Relu", {b.conv(x, 32, 32, 2, 3, 1, 1, 4)});       // grouped
  {  // depthwise 3x3/2, SAME_UPPER on 16: pads (0, 1) per dimension
    auto* n = b.node("Conv", {x, b.weight({32, 1, 3, 3})});
    GraphBuilder::attr(n, "strides", Ints{2, 2});
    GraphBuilder::attr(n, "group", std::int64_t{32});
    GraphBuilder::attr(n, "auto_pad", std::string("SAME_UPPER"));
    x = n->output(0);                                        // [32, 8, 8]
  }
  {
    auto* n = b.node("ConvTranspose", {x, b.weight({32, 32, 2, 2})});
    GraphBuilder::attr(n, "strides", Ints{2, 2});
    x = n->output(0);                                        // [32, 16, 16]
  }
  x = b.flatten(b.op("GlobalAveragePool", {x}));
  b.output(b.gemm(x, 32, 10));
  return b.model();
}

onnx::ModelProto bert_style(const ModelOptions& o) {
  GraphBuilder b("bert_style", o);
  const std::string x = b.input("tokens", {-1, -1, 64}, {"seq"});
  auto heads = [&](const std::string& t, const Ints& perm) { return b.transpose(b.reshape(t, {0, 0, 4, 16}), perm); };
  auto linear = [&](const std::string& t, std::int64_t in, std::int64_t out) {
    return b.op("Add", {b.op("MatMul", {t, b.weight({in, out})}), b.weight({out})});
  };
  const std::string q = heads(linear(x, 64, 64), {0, 2, 1, 3});  // [b, 4, s, 16]
  const std::string k = heads(linear(x, 64, 64), {0, 2, 3, 1});  // [b, 4, 16, s]
  const std::string v = heads(linear(x, 64, 64), {0, 2, 1, 3});
  std::string scores = b.op("MatMul", {q, k});                    // [b, 4, s, s]
  {
    auto* n = b.node("Softmax", {scores});
    GraphBuilder::attr(n, "axis", std::int64_t{-1});
    scores = n->output(0);
  }
  std::string ctx = b.op("MatMul", {scores, v});                  // [b, 4, s, 16]
  ctx = b.reshape(b.transpose(ctx, {0, 2, 1, 3}), {0, 0, 64});
  std::string h = b.op("Add", {x, linear(ctx, 64, 64)});
  const std::string ffn = linear(b.op("Relu", {linear(h, 64, 256)}), 256, 64);
  h = b.op("Add", {h, ffn});
  b.output(b.gemm(b.reshape(h, {-1, 64}), 64, 2));                // per-token classifier
  return b.model();
}

onnx::ModelProto fused_patterns(const ModelOptions& o) {
  GraphBuilder b("fused_patterns", o);
  b.model().mutable_opset_import(0)->set_version(14);  // HardSwish
  auto image = [&](const std::string& name) { return b.input(name, {-1, 8, 8, 8}); };
  auto conv = [&](const std::string& x, const std::string& name, bool bias) {
    const std::string y = b.conv(x, 8, 16, 2, 3, 1, 1, 1, bias);
    b.name_producer(y, name);
    return y;
  };
  auto bn = [&](const std::string& x) {
    return b.op("BatchNormalization", {x, b.weight({16}), b.weight({16}), b.weight({16}), b.weight({16})});
  };
  b.output(b.op("Relu", {bn(conv(image("x0"), "bn_relu", true))}));
  {
    const std::string x = image("x1");
    const std::string sum = b.op("Add", {bn(conv(x, "bn_add_clip", false)), b.op("Identity", {b.input("r1", {-1, 16, 8, 8})})});
    b.output(b.op("Clip", {sum, b.scalar(0.f), b.scalar(6.f)}));
  }
  b.output(b.op("HardSwish", {conv(image("x2"), "hardswish", false)}));
  {
    auto* n = b.node("LeakyRelu", {conv(image("x3"), "leaky", false)});
    GraphBuilder::real_attr(n, "alpha", 0.1f);
    b.output(n->output(0));
  }
  b.output(b.op("HardSigmoid", {conv(image("x4"), "hardsigmoid", false)}));
  auto matmul = [&](const std::string& x, const std::string& name) {
    const std::string y = b.op("MatMul", {x, b.weight({32, 32})});
    b.name_producer(y, name);
    return y;
  };
  {
    const std::string v = b.op("Add", {matmul(b.input("x5", {-1, 32}), "silu"), b.weight({32})});
    b.output(b.op("Mul", {v, b.op("Sigmoid", {v})}));
  }
  {
    const std::string v = b.op("Add", {matmul(b.input("x6", {-1, 32}), "gelu_erf"), b.weight({32})});
    const std::string erf = b.op("Erf", {b.op("Div", {v, b.scalar(1.4142135f)})});
    b.output(b.op("Mul", {b.op("Mul", {v, b.op("Add", {erf, b.scalar(1.f)})}), b.scalar(0.5f)}));
  }
  b.output(b.op("Tanh", {matmul(b.input("x7", {-1, 32}), "tanh")}));
  {
    auto* n = b.node("Gemm", {b.input("x8", {-1, 32}), b.weight({32, 32}), b.weight({32})});
    GraphBuilder::real_attr(n, "alpha", 0.5f);
    GraphBuilder::real_attr(n, "beta", 2.0f);
    n->set_name("gemm_ab");
    b.output(b.op("Sigmoid", {n->output(0)}));
  }
  b.output(b.op("Add", {conv(image("x9"), "channel_add", false), b.weight({1, 16, 1, 1})}));
  {
    const std::string y = conv(image("x10"), "shared", false);
    b.output(b.op("Relu", {y}));
    b.output(y);
  }
  return b.model();
}

onnx::ModelProto conv_nd(const ModelOptions& o) {
  GraphBuilder b("conv_nd", o);
  const std::string a = b.input("signal", {-1, 8, 32});
  b.output(b.op("Relu", {b.conv(a, 8, 16, 1, 3, 1, 1)}));
  b.output(b.conv(a, 8, 8, 1, 3, 1, 1, 2));
  const std::string v = b.input("video", {-1, 4, 8, 16, 16});
  b.output(b.conv(v, 4, 8, 3, 3, 1, 1));
  return b.model();
}

void save_model(const onnx::ModelProto& m, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !m.SerializeToOstream(&out)) throw std::runtime_error("cannot write the model " + path);
}

}  // namespace tmap::testing
