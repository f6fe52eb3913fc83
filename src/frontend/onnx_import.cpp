#include "tmap/frontend/onnx_import.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "tmap/support/diagnostic.h"
#include "tmap/support/sanitizers.h"
#include "tmap/frontend/compute_loader.h"

#ifdef TMAP_HAVE_ONNX
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#endif

namespace tmap {

#ifndef TMAP_HAVE_ONNX

bool onnx_import_available() { return false; }

WorkloadTable import_onnx(const std::string& path, const OnnxImportOptions&) {
  throw UserError(format_diagnostic(SourceLoc::whole(path), "this tmap was built without ONNX support",
                                    "install libonnx-dev and libprotobuf-dev (bash tools/setup.sh does) and rebuild; "
                                    "or import on another machine and pass the table with --table"));
}

#else

namespace {

using Shape = std::vector<std::int64_t>;  // -1: unknown extent

constexpr const char* kCheckModel = "check the model with onnx.checker.check_model";

/// Fails with `msg`, which may quote the model's names: they are shown as printable().
[[noreturn]] void fail(const std::string& path, const std::string& msg, const std::string& hint) {
  throw UserError(format_diagnostic(SourceLoc::whole(path), printable(msg, 2000), printable(hint, 2000)));
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return out + "]";
}

std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

/// A node's attributes by name.
class Attributes {
 public:
  explicit Attributes(const onnx::NodeProto& n) {
    for (const auto& a : n.attribute()) by_name_[a.name()] = &a;
  }
  std::int64_t integer(const std::string& name, std::int64_t fallback) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? fallback : it->second->i();
  }
  double real(const std::string& name, double fallback) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? fallback : it->second->f();
  }
  std::string text(const std::string& name, const std::string& fallback) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? fallback : it->second->s();
  }
  std::optional<Shape> ints(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return std::nullopt;
    return Shape(it->second->ints().begin(), it->second->ints().end());
  }

 private:
  std::map<std::string, const onnx::AttributeProto*> by_name_;
};

/// Why a contraction node cannot be mapped: thrown while reading it, caught per node.
struct Unsupported {
  std::string reason;
};

struct Contraction {
  std::string op;
  std::vector<std::pair<std::string, std::int64_t>> params;
  std::vector<std::string> notes;
};

bool all_equal(const Shape& s) { return std::adjacent_find(s.begin(), s.end(), std::not_equal_to<>()) == s.end(); }

std::string ints_text(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

/// A convolution's padding, each dimension's start then each one's end: `pads`, or what
/// `auto_pad` makes of the input `x` (N, C, spatial...) and the filter.
Shape conv_pads(const Attributes& a, const Shape& x, const Shape& kernel, const Shape& strides, const Shape& dilations) {
  const std::size_t rank = kernel.size();
  Shape pads = a.ints("pads").value_or(Shape(2 * rank, 0));
  const std::string auto_pad = a.text("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    pads.assign(2 * rank, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (std::size_t d = 0; d < rank; ++d) {
      const std::int64_t in = x[2 + d], out = (in + strides[d] - 1) / strides[d];
      const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - in);
      pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[rank + d] = total - pads[d];
    }
  } else if (auto_pad != "NOTSET") {
    throw Unsupported{"auto_pad '" + auto_pad + "' is unknown"};
  }
  if (pads.size() != 2 * rank) throw Unsupported{"pads of the wrong length"};
  return pads;
}

/// What a convolution is, once its attributes are read: one stride, dilation and padding.
struct ConvGeometry {
  Shape x, kernel;  ///< The input's shape (N, C, spatial...) and the filter's spatial extents.
  std::int64_t K = 0, groups = 1, stride = 1, pad = 0, dil = 1;
};

/// The built-in op of a convolution of 1, 2 or 3 spatial dimensions, and its parameters.
Contraction conv_op(const ConvGeometry& g, bool channels_last) {
  const Shape& x = g.x;
  const Shape& k = g.kernel;
  const std::int64_t N = x[0], C = x[1];
  Contraction c;
  if (k.size() == 1) {
    if (g.groups != 1) throw Unsupported{"grouped 1-D convolution (group " + std::to_string(g.groups) + "): tmap's conv1d has no groups"};
    c.op = "conv1d";
    c.params = {{"N", N}, {"C", C}, {"W", x[2]}, {"K", g.K}, {"S", k[0]}, {"stride", g.stride}, {"pad", g.pad}, {"dil", g.dil}};
  } else if (k.size() == 2) {
    if (g.groups > 1 && g.groups == C && g.K == C && !channels_last) {
      c.op = "depthwise_conv2d";
      c.params = {{"N", N}, {"C", C}, {"H", x[2]}, {"W", x[3]}, {"R", k[0]}, {"S", k[1]},
                  {"stride", g.stride}, {"pad", g.pad}, {"dil", g.dil}};
    } else {
      c.op = channels_last ? "conv2d_nhwc" : "conv2d";
      c.params = {{"N", N}, {"C", C}, {"H", x[2]}, {"W", x[3]}, {"K", g.K}, {"R", k[0]}, {"S", k[1]},
                  {"stride", g.stride}, {"pad", g.pad}, {"dil", g.dil}, {"groups", g.groups}};
    }
  } else {
    if (g.groups != 1) throw Unsupported{"grouped 3-D convolution (group " + std::to_string(g.groups) + "): tmap's conv3d has no groups"};
    c.op = "conv3d";
    c.params = {{"N", N},    {"C", C},    {"D", x[2]},         {"H", x[3]},    {"W", x[4]},    {"K", g.K},
                {"T", k[0]}, {"R", k[1]}, {"S", k[2]}, {"stride", g.stride}, {"pad", g.pad}, {"dil", g.dil}};
  }
  return c;
}

Contraction read_conv(const onnx::NodeProto& n, const Attributes& a, const Shape& x, const Shape& w, bool channels_last) {
  if (x.size() < 3 || x.size() > 5) throw Unsupported{"input of rank " + std::to_string(x.size()) + ": tmap maps 1-D, 2-D and 3-D convolutions"};
  const std::size_t rank = x.size() - 2;
  if (w.size() != x.size()) throw Unsupported{"weight rank " + std::to_string(w.size()) + " differs from the input's " + std::to_string(x.size())};
  ConvGeometry g{x, Shape(w.begin() + 2, w.end()), w[0], a.integer("group", 1)};
  const std::int64_t C = x[1];
  if (g.groups < 1 || C % g.groups || g.K % g.groups || w[1] * g.groups != C)
    throw Unsupported{"group " + std::to_string(g.groups) + " does not divide channels " + std::to_string(C) + " -> " + std::to_string(g.K)};
  if (auto ks = a.ints("kernel_shape"); ks && *ks != g.kernel)
    throw Unsupported{"kernel_shape " + ints_text(*ks) + " disagrees with the weight's " + ints_text(g.kernel)};
  const Shape strides = a.ints("strides").value_or(Shape(rank, 1));
  const Shape dilations = a.ints("dilations").value_or(Shape(rank, 1));
  if (strides.size() != rank || dilations.size() != rank) throw Unsupported{"strides or dilations of the wrong length"};
  const Shape pads = conv_pads(a, x, g.kernel, strides, dilations);
  if (!all_equal(strides)) throw Unsupported{"strides " + ints_text(strides) + " differ per dimension; tmap's convolutions take one stride"};
  if (!all_equal(dilations)) throw Unsupported{"dilations " + ints_text(dilations) + " differ per dimension; tmap's convolutions take one dilation"};
  if (!all_equal(pads)) throw Unsupported{"pads " + ints_text(pads) + " are asymmetric or differ per dimension; tmap's convolutions take one padding"};
  g.stride = strides[0], g.dil = dilations[0], g.pad = pads[0];
  Contraction c = conv_op(g, channels_last);
  if (n.input_size() > 2 && !n.input(2).empty()) c.notes.push_back("bias add not fused");
  return c;
}

Contraction read_gemm(const onnx::NodeProto& n, const Attributes& a, const Shape& A, const Shape& B) {
  if (A.size() != 2 || B.size() != 2) throw Unsupported{"Gemm operands must be matrices, not " + shape_text(A) + " and " + shape_text(B)};
  const bool ta = a.integer("transA", 0) != 0, tb = a.integer("transB", 0) != 0;
  const std::int64_t M = ta ? A[1] : A[0], K = ta ? A[0] : A[1];
  const std::int64_t KB = tb ? B[1] : B[0], N = tb ? B[0] : B[1];
  if (K != KB) throw Unsupported{"inner dimensions differ: " + shape_text(A) + " x " + shape_text(B)};
  Contraction c;
  c.op = std::string("gemm") + (ta || tb ? std::string("_") + (ta ? "t" : "n") + (tb ? "t" : "n") : "");
  c.params = {{"M", M}, {"N", N}, {"K", K}};
  if (a.real("alpha", 1.0) != 1.0) c.notes.push_back("alpha scaling not fused");
  if (n.input_size() > 2 && !n.input(2).empty() && a.real("beta", 1.0) != 0.0) c.notes.push_back("bias C not fused");
  return c;
}

Contraction read_matmul(const Shape& A, const Shape& B) {
  if (A.empty() || B.empty()) throw Unsupported{"scalar operand"};
  if (A.size() == 1 && B.size() == 1) throw Unsupported{"a dot product of two vectors: no kernel worth tuning"};
  Contraction c;
  if (B.size() == 1) {  // [..., M, K] x [K]: a matrix-vector product over the flattened rows
    if (A.back() != B[0]) throw Unsupported{"inner dimensions differ: " + shape_text(A) + " x " + shape_text(B)};
    c.op = "gemv";
    c.params = {{"M", product(A, 0, A.size() - 1)}, {"K", A.back()}};
    return c;
  }
  const std::int64_t K = B[B.size() - 2], N = B.back();
  const std::int64_t KA = A.back(), M = A.size() == 1 ? 1 : A[A.size() - 2];
  if (K != KA) throw Unsupported{"inner dimensions differ: " + shape_text(A) + " x " + shape_text(B)};
  const std::int64_t batch_b = product(B, 0, B.size() - 2);
  if (batch_b == 1) {  // B one matrix: A's leading dimensions flatten into rows
    c.op = "gemm";
    c.params = {{"M", product(A, 0, A.size() - 1)}, {"N", N}, {"K", K}};
    return c;
  }
  const Shape batch_a_dims(A.begin(), A.end() - std::min<std::size_t>(A.size(), 2));
  const Shape batch_b_dims(B.begin(), B.end() - 2);
  if (batch_a_dims != batch_b_dims) {
    if (product(A, 0, A.size() - std::min<std::size_t>(A.size(), 2)) == 1)
      throw Unsupported{"operand A " + shape_text(A) + " is broadcast across B's batch " + shape_text(B) +
                        "; tmap's batched_gemm needs both operands batched"};
    throw Unsupported{"batch dimensions broadcast: " + shape_text(A) + " x " + shape_text(B)};
  }
  c.op = "batched_gemm";
  c.params = {{"BATCH", batch_b}, {"M", M}, {"N", N}, {"K", K}};
  return c;
}

// ---- Fusing what follows a contraction into its epilogue ----

/// The graph's wiring: each value's consumers, the graph's outputs, and constant tensors
/// (initializers and Constant nodes).
struct Wiring {
  std::map<std::string, std::vector<const onnx::NodeProto*>> consumers;
  std::set<std::string> outputs;
  std::map<std::string, const onnx::TensorProto*> constants;

  explicit Wiring(const onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      for (const auto& in : n.input()) consumers[in].push_back(&n);
      if (n.op_type() == "Constant" && n.output_size() == 1)
        for (const auto& a : n.attribute())
          if (a.name() == "value" && a.has_t()) constants[n.output(0)] = &a.t();
    }
    for (const auto& t : g.initializer()) constants[t.name()] = &t;
    for (const auto& o : g.output()) outputs.insert(o.name());
  }
  /// The one node that reads `value`, when it has exactly one and is no graph output.
  const onnx::NodeProto* sole_consumer(const std::string& value) const {
    auto it = consumers.find(value);
    if (it == consumers.end() || it->second.size() != 1 || outputs.count(value)) return nullptr;
    return it->second.front();
  }
  /// The value of a one-element float or double constant.
  std::optional<double> scalar(const std::string& name) const {
    auto it = constants.find(name);
    if (it == constants.end()) return std::nullopt;
    const onnx::TensorProto& t = *it->second;
    std::int64_t n = 1;
    for (auto d : t.dims()) n *= d;
    if (n != 1) return std::nullopt;
    if (t.data_type() == onnx::TensorProto::FLOAT) {
      if (t.float_data_size() == 1) return t.float_data(0);
      if (t.raw_data().size() == 4) {
        float f;
        std::memcpy(&f, t.raw_data().data(), 4);
        return f;
      }
    }
    if (t.data_type() == onnx::TensorProto::DOUBLE) {
      if (t.double_data_size() == 1) return t.double_data(0);
      if (t.raw_data().size() == 8) {
        double d;
        std::memcpy(&d, t.raw_data().data(), 8);
        return d;
      }
    }
    return std::nullopt;
  }
};

/// How the contraction's output in tmap's layout covers the ONNX output's dimensions: each of
/// tmap's output dimensions, in its order, with its index text and the ONNX dimensions it spans.
struct OutputDims {
  std::string acc;  ///< "Out[n, k, p, q]": the contraction's value as an epilogue reads it.
  std::vector<std::pair<std::string, std::vector<int>>> dims;
  Shape onnx_shape;
};

/// Whether the dimensions `o` spans cover the ONNX shape once each and multiply to the extents of
/// `c`'s output: a model may declare any shape for a value, which must agree to be indexed.
bool covers_output(const OutputDims& o, const Compute& c) {
  const std::vector<std::int64_t>& extents = c.tensor_of(c.output).shape;
  if (o.dims.size() != extents.size()) return false;
  std::vector<int> seen(o.onnx_shape.size(), 0);
  for (std::size_t i = 0; i < o.dims.size(); ++i) {
    std::int64_t span = 1;
    for (int d : o.dims[i].second) {
      if (d < 0 || d >= static_cast<int>(seen.size()) || seen[d]++ || o.onnx_shape[d] < 1 || o.onnx_shape[d] > extents[i])
        return false;
      span *= o.onnx_shape[d];  // at most extents[i] per factor, and checked below before the next
      if (span > extents[i]) return false;
    }
    if (span != extents[i]) return false;
  }
  return std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; });
}

/// The contraction's output dimensions against the ONNX output's; nothing when the model's
/// shape for it disagrees with the contraction (then nothing is fused).
std::optional<OutputDims> output_dims(const Compute& c, const std::string& op, const Shape& onnx_shape) {
  OutputDims o;
  o.onnx_shape = onnx_shape;
  const std::string statement = c.statement_text();
  o.acc = statement.substr(0, statement.find(" +="));
  std::vector<std::string> idx;
  const std::vector<std::string> names = c.iterator_names();
  for (const auto& e : c.output.indices) idx.push_back(to_string(e, names));
  const int r = static_cast<int>(onnx_shape.size());
  auto range = [](int from, int to) {
    std::vector<int> v;
    for (int d = from; d < to; ++d) v.push_back(d);
    return v;
  };
  if (idx.empty()) return std::nullopt;
  if (op == "conv2d_nhwc") {  // ONNX [N, K, P, Q] stored [N, P, Q, K]
    o.dims = {{idx[0], {0}}, {idx[1], {2}}, {idx[2], {3}}, {idx[3], {1}}};
  } else if (op.rfind("conv", 0) == 0 || op == "depthwise_conv2d") {
    for (int d = 0; d < r; ++d) o.dims.push_back({idx[d], {d}});
  } else if (op == "batched_gemm") {  // [batch..., M, N]: the batch dimensions flattened
    o.dims = {{idx[0], range(0, r - 2)}, {idx[1], {r - 2}}, {idx[2], {r - 1}}};
  } else if (op == "gemv") {
    o.dims = {{idx[0], range(0, r)}};
  } else {  // gemm: A's leading dimensions flattened into M
    o.dims = {{idx[0], range(0, r - 1)}, {idx[1], {r - 1}}};
  }
  if (!covers_output(o, c)) return std::nullopt;
  return o;
}

/// `name`[...] reading an ONNX operand of `shape` broadcast against the output, or nothing when
/// the broadcast is not affine in tmap's output (part of a flattened dimension).
std::optional<std::string> operand_access(const OutputDims& o, const std::string& name, const Shape& shape) {
  const std::size_t r = o.onnx_shape.size();
  if (shape.size() > r) return std::nullopt;
  Shape aligned(r - shape.size(), 1);
  aligned.insert(aligned.end(), shape.begin(), shape.end());
  std::string index;
  for (const auto& [text, spans] : o.dims) {
    int full = 0, ones = 0;
    for (int d : spans) {
      if (o.onnx_shape[d] == 1) continue;  // index 0 either way (a batch of 1): no index term
      if (aligned[d] == 1) ++ones;
      else if (aligned[d] == o.onnx_shape[d]) ++full;
      else return std::nullopt;
    }
    if (full > 0 && ones > 0) return std::nullopt;
    if (full > 0) index += (index.empty() ? "" : ", ") + text;
  }
  return name + "[" + (index.empty() ? "0" : index) + "]";
}

/// What an import fuses into one contraction: the epilogue's text (empty: nothing) and the
/// nodes it computes.
struct Fused {
  std::string epilogue;
  std::vector<const onnx::NodeProto*> absorbed;
  bool own = false;  ///< The contraction's own terms (bias, Gemm's alpha and beta) are in it.
};

/// The activation node `n` applied to expression `e`, or nothing when it is none tmap fuses (or
/// its constants are not known).
std::optional<std::string> activation(const onnx::NodeProto& n, const std::string& e, const Wiring& w) {
  const Attributes a(n);
  const std::string& t = n.op_type();
  auto number = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  if (t == "Relu") return "relu(" + e + ")";
  if (t == "Sigmoid") return "sigmoid(" + e + ")";
  if (t == "Tanh") return "tanh(" + e + ")";
  if (t == "LeakyRelu") return "leaky_relu(" + e + ", " + number(a.real("alpha", 0.01)) + ")";
  if (t == "HardSigmoid")
    return "clamp(" + number(a.real("alpha", 0.2)) + " * (" + e + ") + " + number(a.real("beta", 0.5)) + ", 0, 1)";
  if (t == "HardSwish") return "(" + e + ") * clamp((" + e + ") / 6 + 0.5, 0, 1)";
  if (t == "Gelu") {
    const std::string approximate = a.text("approximate", "none");
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    return (approximate == "tanh" ? "gelu_tanh(" : "gelu(") + e + ")";
  }
  if (t == "Clip") {
    std::optional<double> lo, hi;
    if (n.input_size() > 1 && !n.input(1).empty()) lo = w.scalar(n.input(1));
    if (n.input_size() > 2 && !n.input(2).empty()) hi = w.scalar(n.input(2));
    if ((n.input_size() > 1 && !n.input(1).empty() && !lo) || (n.input_size() > 2 && !n.input(2).empty() && !hi))
      return std::nullopt;  // bounds computed in the graph
    for (const auto& at : n.attribute()) {  // opset 6's attributes
      if (at.name() == "min") lo = at.f();
      if (at.name() == "max") hi = at.f();
    }
    if (lo && hi) return "clamp(" + e + ", " + number(*lo) + ", " + number(*hi) + ")";
    if (lo) return "max(" + e + ", " + number(*lo) + ")";
    if (hi) return "min(" + e + ", " + number(*hi) + ")";
    return std::nullopt;
  }
  return std::nullopt;
}

/// x * Sigmoid(x) on `value` (SiLU): its two consumers are a Sigmoid read only by a Mul of both.
const onnx::NodeProto* silu_at(const std::string& value, const Wiring& w, std::vector<const onnx::NodeProto*>& nodes) {
  auto it = w.consumers.find(value);
  if (it == w.consumers.end() || it->second.size() != 2 || w.outputs.count(value)) return nullptr;
  for (const onnx::NodeProto* s : it->second) {
    if (s->op_type() != "Sigmoid") continue;
    const onnx::NodeProto* m = w.sole_consumer(s->output(0));
    const onnx::NodeProto* other = it->second[0] == s ? it->second[1] : it->second[0];
    if (m != other || m->op_type() != "Mul" || m->input_size() != 2) return nullptr;
    if (!((m->input(0) == value && m->input(1) == s->output(0)) || (m->input(1) == value && m->input(0) == s->output(0))))
      return nullptr;
    nodes = {s, m};
    return m;
  }
  return nullptr;
}

/// GELU's Erf form on `value`: Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(., 0.5).
const onnx::NodeProto* erf_gelu_at(const std::string& value, const Wiring& w, std::vector<const onnx::NodeProto*>& nodes) {
  auto it = w.consumers.find(value);
  if (it == w.consumers.end() || it->second.size() != 2 || w.outputs.count(value)) return nullptr;
  auto near = [](std::optional<double> v, double want) { return v && std::fabs(*v - want) < 1e-3; };
  auto other_input = [](const onnx::NodeProto& n, const std::string& x) {
    return n.input_size() == 2 ? (n.input(0) == x ? n.input(1) : n.input(1) == x ? n.input(0) : "") : "";
  };
  for (const onnx::NodeProto* div : it->second) {
    if (div->op_type() != "Div" || div->input_size() != 2 || div->input(0) != value || !near(w.scalar(div->input(1)), std::sqrt(2.0)))
      continue;
    const onnx::NodeProto* erf = w.sole_consumer(div->output(0));
    if (!erf || erf->op_type() != "Erf") return nullptr;
    const onnx::NodeProto* add = w.sole_consumer(erf->output(0));
    if (!add || add->op_type() != "Add" || !near(w.scalar(other_input(*add, erf->output(0))), 1.0)) return nullptr;
    const onnx::NodeProto* mul = w.sole_consumer(add->output(0));
    const onnx::NodeProto* other = it->second[0] == div ? it->second[1] : it->second[0];
    if (mul != other || mul->op_type() != "Mul" || other_input(*mul, add->output(0)) != value) return nullptr;
    const onnx::NodeProto* half = w.sole_consumer(mul->output(0));
    if (!half || half->op_type() != "Mul" || !near(w.scalar(other_input(*half, mul->output(0))), 0.5)) return nullptr;
    nodes = {div, erf, add, mul, half};
    return half;
  }
  return nullptr;
}

/// Follows contraction node `n`'s output through what tmap fuses, building the epilogue.
Fused fuse_after(const onnx::NodeProto& n, const OutputDims& o, const Wiring& w,
                 const std::map<std::string, Shape>& shapes, const std::set<const onnx::NodeProto*>& taken) {
  Fused f;
  std::string e = o.acc, value = n.output(0);
  std::set<std::string> names;
  auto operand = [&](const std::string& base, const Shape& shape) -> std::optional<std::string> {
    std::string name = base;
    for (int k = 2; names.count(name); ++k) name = base + std::to_string(k);
    auto access = operand_access(o, name, shape);
    if (access) names.insert(name);
    return access;
  };
  // e as a factor: in parentheses once it is more than the contraction's value.
  const std::string value_access = e;
  auto factor = [&] { return e == value_access ? e : "(" + e + ")"; };
  Shape channel(o.onnx_shape.size(), 1);  // [1, K, 1, ...]: per output channel
  if (channel.size() > 1) channel[1] = o.onnx_shape[1];
  const bool conv = n.op_type() == "Conv";
  if (conv && n.input_size() > 2 && !n.input(2).empty()) {
    if (auto b = operand("bias", channel)) e = e + " + " + *b, f.own = true;
  }
  if (n.op_type() == "Gemm") {
    const Attributes a(n);
    if (a.real("alpha", 1.0) != 1.0) e = factor() + " * " + std::to_string(a.real("alpha", 1.0)), f.own = true;
    if (n.input_size() > 2 && !n.input(2).empty() && a.real("beta", 1.0) != 0.0) {
      auto s = shapes.find(n.input(2));
      auto b = s == shapes.end() ? std::nullopt : operand("bias", s->second);
      if (!b) return {};  // alpha and beta stay unfused with it
      e = e + " + " + (a.real("beta", 1.0) == 1.0 ? "" : std::to_string(a.real("beta", 1.0)) + " * ") + *b;
      f.own = true;
    }
  }
  bool normalized = false, activated = false;
  while (!activated) {
    std::vector<const onnx::NodeProto*> pattern;
    if (const onnx::NodeProto* m = silu_at(value, w, pattern)) {
      e = "silu(" + e + ")";
      f.absorbed.insert(f.absorbed.end(), pattern.begin(), pattern.end());
      value = m->output(0);
      break;
    }
    if (const onnx::NodeProto* m = erf_gelu_at(value, w, pattern)) {
      e = "gelu(" + e + ")";
      f.absorbed.insert(f.absorbed.end(), pattern.begin(), pattern.end());
      value = m->output(0);
      break;
    }
    const onnx::NodeProto* next = w.sole_consumer(value);
    // An Add of two contractions' values is fused into the first: the other's value is its residual.
    if (!next || taken.count(next) || (!next->domain().empty() && next->domain() != "ai.onnx") || next->output_size() < 1) break;
    // A graph with a cycle (invalid, but a file may hold one) would lead back to a node seen.
    if (next == &n || std::find(f.absorbed.begin(), f.absorbed.end(), next) != f.absorbed.end()) break;
    const std::string& t = next->op_type();
    auto out_shape = shapes.find(next->output(0));
    if (out_shape == shapes.end() || out_shape->second != o.onnx_shape) break;  // it broadcasts the output
    if (t == "BatchNormalization" && conv && !normalized && next->output_size() == 1 && next->input_size() == 5 &&
        Attributes(*next).integer("training_mode", 0) == 0) {
      auto s = operand("scale", channel), b = operand(f.own ? "bias_bn" : "bias", channel);
      if (!s || !b) break;
      e = factor() + " * " + *s + " + " + *b;
      normalized = true;
    } else if (t == "Add" && next->input_size() == 2) {
      const std::string& other = next->input(0) == value ? next->input(1) : next->input(0);
      auto s = shapes.find(other);
      if (s == shapes.end()) break;
      const bool full = s->second == o.onnx_shape;
      auto x = operand(full ? "residual" : "bias", s->second);
      if (!x) break;
      e = e + " + " + *x;
    } else if (auto a = activation(*next, e, w)) {
      e = *a;
      activated = true;
    } else {
      break;
    }
    f.absorbed.push_back(next);
    value = next->output(0);
  }
  if (f.absorbed.empty() && !f.own) return {};
  f.epilogue = "Y" + o.acc.substr(o.acc.find('[')) + " = " + e;
  return f;
}

std::string sanitized(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.' ? ch : '_';
  return out.substr(0, 64);
}

}  // namespace

bool onnx_import_available() { return true; }

/// The model at `path`, parsed, after checking that it is a readable file under 2 GiB.
void read_model(const std::string& path, onnx::ModelProto& model) {
  namespace fs = std::filesystem;
  const std::string hint = "give the path of an ONNX model (.onnx)";
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such model file", hint);
  if (fs::is_directory(path, ec)) fail(path, "'" + path + "' is a directory, not a model", hint);
  const auto size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read the model: " + ec.message(), hint);
  if (size == 0) fail(path, "the model file is empty", hint);
  if (size >= (std::uintmax_t{2} << 30)) fail(path, "the model is 2 GiB or larger", "protobuf reads models under 2 GiB; keep external data beside it");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the model", hint);
  if (!model.ParseFromIstream(&in) || !model.has_graph())
    fail(path, "not an ONNX model (the file does not parse as an ONNX ModelProto with a graph)",
         "export the model with torch.onnx.export or onnx.save");
}

/// What fixing the inputs' symbolic dimensions found: the options used and what stays unset.
struct SymbolicDims {
  std::set<std::string> used_dims, names;
  std::vector<std::string> unresolved;
  bool batch_used = false;
  std::string fixed_batch_example;  ///< An input with a fixed batch, for --batch's error.
};

/// Sets `input`'s symbolic dimensions from --dim (by name) and --batch (the first dimension),
/// and notes in `s` what it used and what it could not set.
void fix_input_dims(onnx::ValueInfoProto& input, const OnnxImportOptions& o, SymbolicDims& s) {
  auto* tensor = input.mutable_type()->mutable_tensor_type();
  if (!tensor->has_shape()) {
    s.unresolved.push_back("input '" + input.name() + "' has no shape");
    return;
  }
  auto* shape = tensor->mutable_shape();
  for (int i = 0; i < shape->dim_size(); ++i) {
    auto* d = shape->mutable_dim(i);
    if (d->has_dim_value()) {
      if (i == 0 && s.fixed_batch_example.empty())
        s.fixed_batch_example = "input '" + input.name() + "' has a fixed batch of " + std::to_string(d->dim_value());
      continue;
    }
    const std::string name = d->has_dim_param() ? d->dim_param() : "";
    if (!name.empty()) s.names.insert(name);
    if (!name.empty() && o.dims.count(name)) {
      s.used_dims.insert(name);
      d->set_dim_value(o.dims.at(name));
    } else if (i == 0 && o.batch > 0) {
      s.batch_used = true;
      d->set_dim_value(o.batch);
    } else {
      s.unresolved.push_back("input '" + input.name() + "' dimension " + std::to_string(i) +
                             (name.empty() ? " (unnamed)" : " ('" + name + "')"));
    }
  }
}

/// Fixes the symbolic dimensions of the model's inputs from --batch and --dim; each of those must
/// be used, and none may be left unset.
void fix_symbolic_dims(onnx::GraphProto* g, const OnnxImportOptions& o, const std::string& path) {
  std::set<std::string> initializers;
  for (const auto& t : g->initializer()) initializers.insert(t.name());
  SymbolicDims s;
  for (auto& input : *g->mutable_input())
    if (!initializers.count(input.name()) && input.type().has_tensor_type()) fix_input_dims(input, o, s);
  for (const auto& [name, value] : o.dims) {
    if (s.used_dims.count(name)) continue;
    const std::string known = join(std::vector<std::string>(s.names.begin(), s.names.end()));
    fail("--dim " + name, "the model has no symbolic input dimension '" + name + "'",
         known.empty() ? "its inputs have no symbolic dimensions: drop --dim" : "its symbolic dimensions: " + known);
  }
  if (o.batch > 0 && !s.batch_used)
    fail("--batch", "the model's inputs have no symbolic batch dimension" +
                        (s.fixed_batch_example.empty() ? "" : " (" + s.fixed_batch_example + ")"),
         "drop --batch, or export the model with a dynamic batch dimension");
  if (!s.unresolved.empty())
    fail(path, "symbolic dimensions are unset: " + join(s.unresolved),
         "give --batch N for the batch (first) dimension and --dim NAME=VALUE for the others");
}

/// Every value's shape after shape inference (-1 for a dimension still unknown).
std::map<std::string, Shape> value_shapes(const onnx::GraphProto* g) {
  std::map<std::string, Shape> shapes;
  for (const auto& t : g->initializer()) shapes[t.name()] = Shape(t.dims().begin(), t.dims().end());
  auto add_value = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape() || shapes.count(v.name())) return;
    Shape s;
    for (const auto& d : v.type().tensor_type().shape().dim()) s.push_back(d.has_dim_value() ? d.dim_value() : -1);
    shapes[v.name()] = s;
  };
  for (const auto& v : g->input()) add_value(v);
  for (const auto& v : g->value_info()) add_value(v);
  for (const auto& v : g->output()) add_value(v);

  return shapes;
}

namespace {

/// The shapes of value_shapes(), as a GraphProto of named tensors without data (dims -1: unknown).
std::string encode_shapes(const std::map<std::string, Shape>& shapes) {
  onnx::GraphProto g;
  for (const auto& [name, shape] : shapes) {
    onnx::TensorProto* t = g.add_initializer();
    t->set_name(name);
    for (std::int64_t d : shape) t->add_dims(d);
  }
  return g.SerializeAsString();
}

/// The shapes of encode_shapes(); nothing when `bytes` do not parse.
std::optional<std::map<std::string, Shape>> decode_shapes(const std::string& bytes) {
  onnx::GraphProto g;
  if (!g.ParseFromString(bytes)) return std::nullopt;
  std::map<std::string, Shape> shapes;
  for (const auto& t : g.initializer()) shapes[t.name()] = Shape(t.dims().begin(), t.dims().end());
  return shapes;
}

/// Caps this process's address space at what it maps now plus `bytes`.
void limit_address_space(std::uint64_t bytes) {
  if (kAddressSanitizer) return;
  std::uint64_t pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%" SCNu64, &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages == 0) return;  // no /proc: no cap rather than a wrong one
  const rlimit cap{pages * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) + bytes, RLIM_INFINITY};
  setrlimit(RLIMIT_AS, &cap);
}

/// In a child process: ONNX's shape inference of `model`, written to `fd` as 'S' and the shapes,
/// 'E' and the error, or 'M' when it needed more than `memory` bytes. It never returns.
[[noreturn]] void infer_in_child(onnx::ModelProto& model, int fd, unsigned seconds, std::uint64_t memory) {
  // A crash ends the child by its signal, past any handler the parent installed (a sanitizer's,
  // a fuzzer's), for the parent to report.
  for (int sig : {SIGALRM, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
  alarm(seconds);
  std::string out;
  limit_address_space(memory);
  try {
    onnx::shape_inference::InferShapes(model);
    out = "S" + encode_shapes(value_shapes(model.mutable_graph()));
  } catch (const std::bad_alloc&) {
    out = "M";
  } catch (const std::exception& e) {
    out = std::string("E") + e.what();
  }
  for (std::size_t done = 0; done < out.size();) {
    const ssize_t n = write(fd, out.data() + done, out.size() - done);
    if (n <= 0) _exit(4);
    done += static_cast<std::size_t>(n);
  }
  _exit(0);
}

}  // namespace

/// Every value's shape after ONNX's shape inference (-1: unknown). libonnx's inference trusts
/// attribute values it does not check (a zero stride divides by zero), so it runs in a child
/// process: a model that crashes, hangs or needs more than `memory` bytes there is an error
/// naming the model, not the end of tmap.
std::map<std::string, Shape> inferred_shapes(onnx::ModelProto& model, const std::string& path, std::uint64_t memory) {
  constexpr unsigned kSeconds = 120;
  // Close-on-exec: a process another thread starts meanwhile must not hold the write end open.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    fail(path, std::string("cannot start ONNX shape inference: ") + std::strerror(errno), kCheckModel);
  const pid_t child = fork();
  if (child < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    fail(path, std::string("cannot start ONNX shape inference: ") + std::strerror(error), kCheckModel);
  }
  if (child == 0) {
    close(fds[0]);
    infer_in_child(model, fds[1], kSeconds, memory);
  }
  close(fds[1]);
  std::string reply;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n > 0) reply.append(buf, static_cast<std::size_t>(n));
    else if (errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !reply.empty();
  if (clean && reply[0] == 'E') fail(path, "ONNX shape inference failed: " + reply.substr(1), kCheckModel);
  if (clean && reply == "M")
    fail(path, "ONNX shape inference needed more than " + std::to_string(memory >> 20) +
                   " MiB of memory on this model (the cap keeps a hostile model from exhausting the machine); check that "
                   "this is the model you meant to import", kCheckModel);
  if (clean && reply[0] == 'S')
    if (auto shapes = decode_shapes(reply.substr(1))) return *shapes;
  const std::string how = WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM
                              ? "did not finish within " + std::to_string(kSeconds) + " s"
                          : WIFSIGNALED(status) ? "crashed (signal " + std::to_string(WTERMSIG(status)) + ")"
                          : clean               ? "returned no shapes"
                                                : "crashed (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
  fail(path, "ONNX shape inference " + how + " on this model; an attribute of a node is likely out of its range "
             "(a zero stride or kernel size, say), which libonnx does not check",
       kCheckModel);
}

/// Node `n` (the index-th) into the table: a Conv, Gemm or MatMul becomes a workload (or adds to
/// the count of an equal one); other nodes are counted or listed as unsupported.
/// What add_node reads and keeps across nodes.
struct ImportState {
  const std::map<std::string, Shape>& shapes;
  const Wiring& wiring;
  std::map<std::string, std::size_t> by_key;  ///< op + parameters + epilogue -> workload index
  std::set<std::string> names;
  std::set<const onnx::NodeProto*> absorbed;  ///< Nodes an epilogue computes.
};

std::string node_name(const onnx::NodeProto& n, int index) {
  return n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
}

/// Fuses what follows contraction `n` (read as `c`) into workload `w`, when the fused compute
/// builds; else `w` stays the bare contraction with a note saying why.
void fuse_into(TableWorkload& w, const onnx::NodeProto& n, const Contraction& c, ImportState& s, const OnnxImportOptions& o) {
  const Compute bare = build_table_workload(w, o.dtype, o.out_dtype, "node '" + w.nodes.front() + "'");
  auto onnx_shape = s.shapes.find(n.output(0));
  if (onnx_shape == s.shapes.end()) return;
  const std::optional<OutputDims> dims = output_dims(bare, c.op, onnx_shape->second);
  if (!dims) {
    w.notes.push_back("epilogue not fused: the model gives the output the shape " + shape_text(onnx_shape->second) +
                      ", which is not the contraction's");
    return;
  }
  const Fused f = fuse_after(n, *dims, s.wiring, s.shapes, s.absorbed);
  if (f.epilogue.empty()) return;
  TableWorkload fused = w;
  fused.epilogue = f.epilogue;
  try {
    build_table_workload(fused, o.dtype, o.out_dtype, "node '" + w.nodes.front() + "'");
  } catch (const UserError& e) {
    w.notes.push_back("epilogue not fused: " + diagnostic_message(e.what()));
    return;
  }
  w.epilogue = f.epilogue;
  // The bias and scaling read_conv and read_gemm noted as left out are in the epilogue now.
  if (f.own) std::erase_if(w.notes, [](const std::string& note) { return note.find("not fused") != std::string::npos; });
  for (const onnx::NodeProto* a : f.absorbed) {
    w.absorbed.push_back(a->name().empty() ? a->op_type() + " of " + a->input(0) : a->name());
    s.absorbed.insert(a);
  }
}

/// Notes node `n`, which is no contraction: an operator tmap does not map, one of another domain,
/// or another node outside any kernel.
void note_other_node(WorkloadTable& t, const onnx::NodeProto& n, const std::string& name, bool ai_onnx) {
  static const std::set<std::string> unmapped = {"ConvTranspose", "ConvInteger", "QLinearConv", "MatMulInteger",
                                                 "QLinearMatMul", "Einsum", "DeformConv"};
  const std::string& type = n.op_type();
  if (ai_onnx && unmapped.count(type))
    t.unsupported.push_back({name, type, type + " is not supported yet (tmap maps Conv, Gemm and MatMul)"});
  else if (!ai_onnx)
    t.unsupported.push_back({name, n.domain() + "." + type, "operator of domain '" + n.domain() + "': not read"});
  else
    ++t.other_ops[type];
}

/// The static shapes of contraction `n`'s two operands.
std::vector<Shape> operand_shapes(const onnx::NodeProto& n, const std::map<std::string, Shape>& shapes) {
  std::vector<Shape> operands;
  for (int i = 0; i < std::min(n.input_size(), 2); ++i) {
    auto it = shapes.find(n.input(i));
    if (it == shapes.end()) throw Unsupported{"the shape of input '" + n.input(i) + "' is unknown after shape inference"};
    for (std::int64_t d : it->second)
      if (d < 0) throw Unsupported{"the shape of input '" + n.input(i) + "' " + shape_text(it->second) + " is not static"};
    operands.push_back(it->second);
  }
  if (operands.size() < 2) throw Unsupported{"fewer than two inputs"};
  return operands;
}

/// Contraction `n` as a workload, with what follows it fused when o.fuse.
TableWorkload contraction_workload(const onnx::NodeProto& n, const std::string& name, ImportState& s,
                                   const OnnxImportOptions& o) {
  const std::vector<Shape> operands = operand_shapes(n, s.shapes);
  const Attributes attrs(n);
  const std::string& type = n.op_type();
  Contraction c = type == "Conv"   ? read_conv(n, attrs, operands[0], operands[1], o.channels_last)
                  : type == "Gemm" ? read_gemm(n, attrs, operands[0], operands[1])
                                   : read_matmul(operands[0], operands[1]);
  TableWorkload w;
  w.op = c.op;
  w.params = c.params;
  w.nodes = {name};
  w.notes = c.notes;
  try {
    w.flops = 2.0 * build_table_workload(w, o.dtype, o.out_dtype, "node '" + name + "'").iteration_points();
  } catch (const UserError& e) {
    throw Unsupported{std::string("no valid ") + c.op + ": " + e.what()};
  }
  if (o.fuse) fuse_into(w, n, c, s, o);
  return w;
}

/// Adds `w` to the table, or counts it into the workload of the same op, parameters and epilogue.
void add_workload(WorkloadTable& t, TableWorkload w, ImportState& s) {
  std::string key = w.op + " | " + w.epilogue;
  for (const auto& [p, v] : w.params) key += " " + p + "=" + std::to_string(v);
  const std::string& node = w.nodes.front();
  if (auto it = s.by_key.find(key); it != s.by_key.end()) {
    TableWorkload& same = t.workloads[it->second];
    ++same.count;
    same.nodes.push_back(node);
    same.absorbed.insert(same.absorbed.end(), w.absorbed.begin(), w.absorbed.end());
    for (const auto& note : w.notes)
      if (std::find(same.notes.begin(), same.notes.end(), note) == same.notes.end()) same.notes.push_back(note);
    return;
  }
  w.name = sanitized(node);
  for (int k = 2; !s.names.insert(w.name).second; ++k) w.name = sanitized(node) + "_" + std::to_string(k);
  s.by_key[key] = t.workloads.size();
  t.workloads.push_back(std::move(w));
}

void add_node(WorkloadTable& t, const onnx::NodeProto& n, int index, ImportState& s, const OnnxImportOptions& o) {
  if (s.absorbed.count(&n)) return;
  const std::string& type = n.op_type();
  const std::string name = node_name(n, index);
  const bool ai_onnx = n.domain().empty() || n.domain() == "ai.onnx";
  if (!ai_onnx || (type != "Conv" && type != "Gemm" && type != "MatMul")) return note_other_node(t, n, name, ai_onnx);
  try {
    add_workload(t, contraction_workload(n, name, s, o), s);
  } catch (const Unsupported& u) {
    t.unsupported.push_back({name, type, u.reason});
  }
}

/// The table's text taken from the model (node names, operator types, reasons quoting inputs) as
/// printable() text: a model's strings are bytes, which a terminal or a JSON writer must not get raw.
void make_printable(WorkloadTable& t) {
  for (auto& w : t.workloads)
    for (auto* list : {&w.nodes, &w.absorbed, &w.notes})
      for (auto& text : *list) text = printable(text);
  for (auto& u : t.unsupported) {
    u.node = printable(u.node);
    u.op_type = printable(u.op_type);
    u.reason = printable(u.reason, 1000);
  }
  std::map<std::string, int> others;
  for (const auto& [type, n] : t.other_ops) others[printable(type)] += n;
  t.other_ops = std::move(others);
}

WorkloadTable import_onnx(const std::string& path, const OnnxImportOptions& o) {
  onnx::ModelProto model;
  read_model(path, model);
  onnx::GraphProto* g = model.mutable_graph();
  for (int i = 0; i < g->node_size(); ++i)  // every later step follows nodes by their first output
    if (g->node(i).output_size() == 0)
      fail(path, "node '" + node_name(g->node(i), i + 1) + "' (" + g->node(i).op_type() + ") has no output: not a valid ONNX graph",
           kCheckModel);
  fix_symbolic_dims(g, o, path);
  const std::map<std::string, Shape> shapes = inferred_shapes(model, path, o.inference_memory);
  WorkloadTable t;
  t.title = std::filesystem::path(path).filename().string() + (o.batch > 0 ? " (batch " + std::to_string(o.batch) + ")" : "");
  t.source = path;
  t.batch = o.batch;
  t.dtype = o.dtype;
  t.out_dtype = o.out_dtype;
  const Wiring wiring(*g);
  ImportState state{shapes, wiring, {}, {}, {}};
  int index = 0;
  for (const auto& n : g->node()) add_node(t, n, ++index, state, o);
  make_printable(t);
  return t;
}

#endif

}  // namespace tmap
