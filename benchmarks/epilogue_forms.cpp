// tmap_bench's view of fused epilogues (epilogue_forms.h).
#include "epilogue_forms.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "tmap/ir/dtype.h"
#include "tmap/ir/epilogue.h"

namespace bench {

using tmap::EpiNode;
using tmap::EpiOp;

bool EpilogueView::only_along(int i, int dim) const {
  const OperandView& o = operands[i];
  for (std::size_t d = 0; d < out_shape.size(); ++d)
    if (out_shape[d] > 1 && o.stride[d] != (static_cast<int>(d) == dim ? 1 : 0)) return false;
  return o.base == 0;
}

bool EpilogueView::like_output(int i) const {
  const OperandView& o = operands[i];
  std::int64_t s = 1;
  for (std::size_t d = out_shape.size(); d-- > 0;) {
    if (out_shape[d] > 1 && o.stride[d] != s) return false;
    s *= out_shape[d];
  }
  return o.base == 0;
}

std::optional<EpilogueView> epilogue_view(const Compute& c, std::string& why) {
  const tmap::Tensor& out = c.tensor_of(c.output);
  EpilogueView v;
  v.out_shape = out.shape;
  // The iterator that walks each output dimension (iterators of extent 1 are always 0).
  std::vector<int> dim_iter(out.shape.size(), -1);
  for (std::size_t d = 0; d < out.shape.size(); ++d) {
    const tmap::AffineExpr& e = c.output.indices[d];
    for (const auto& [it, coef] : e.terms) {
      if (c.iters[it].extent == 1) continue;
      if (dim_iter[d] != -1 || coef != 1) {
        why = "output dimension " + std::to_string(d) + " is not indexed by one iterator";
        return std::nullopt;
      }
      dim_iter[d] = it;
    }
    if (e.constant != 0) {
      why = "output dimension " + std::to_string(d) + " has a constant offset";
      return std::nullopt;
    }
  }
  for (const tmap::Access& a : c.epilogue.operands) {
    const tmap::Tensor& t = c.tensor_of(a);
    OperandView o;
    o.tensor = a.tensor;
    o.stride.assign(out.shape.size(), 0);
    std::int64_t st = 1;
    for (std::size_t e = t.shape.size(); e-- > 0; st *= t.shape[e]) {
      o.base += a.indices[e].constant * st;
      for (const auto& [it, coef] : a.indices[e].terms) {
        if (c.iters[it].extent == 1) continue;
        const auto d = std::find(dim_iter.begin(), dim_iter.end(), it) - dim_iter.begin();
        if (d == static_cast<std::ptrdiff_t>(dim_iter.size())) {
          why = "operand " + t.name + " is indexed by an iterator no output dimension is";
          return std::nullopt;
        }
        o.stride[d] += coef * st;
      }
    }
    o.full = true;
    for (std::size_t d = 0; d < out.shape.size(); ++d) o.full = o.full && (out.shape[d] == 1 || o.stride[d] != 0);
    v.operands.push_back(o);
  }
  return v;
}

EpiTree epilogue_tree(const tmap::Epilogue& e) {
  EpiTree t;
  std::vector<int> stack;
  for (const EpiNode& n : e.program) {
    const int arity = tmap::epi_arity(n.op);
    std::vector<int> args(stack.end() - arity, stack.end());
    stack.resize(stack.size() - arity);
    bool chain = n.op == EpiOp::kAcc;
    for (int a : args) chain = chain || t.chain[a];
    t.nodes.push_back(n);
    t.args.push_back(args);
    t.chain.push_back(chain);
    stack.push_back(static_cast<int>(t.nodes.size()) - 1);
  }
  t.root = stack.back();
  return t;
}

namespace {

/// Splits a tree of adds at `node` into its terms.
void add_terms(const EpiTree& t, int node, std::vector<int>& terms) {
  if (t.nodes[node].op == EpiOp::kAdd) {
    for (int a : t.args[node]) add_terms(t, a, terms);
    return;
  }
  terms.push_back(node);
}

bool is_op(const EpiTree& t, int node, EpiOp op) { return t.nodes[node].op == op; }

}  // namespace

std::optional<BiasActForm> bias_act_form(const Compute& c, const EpilogueView& v, int channel_dim) {
  const EpiTree t = epilogue_tree(c.epilogue);
  BiasActForm f;
  int node = t.root;
  for (EpiOp act : {EpiOp::kRelu, EpiOp::kGelu, EpiOp::kGeluTanh, EpiOp::kSilu, EpiOp::kSigmoid, EpiOp::kTanh})
    if (is_op(t, node, act)) {
      f.act = act, node = t.args[node][0];
      break;
    }
  std::vector<int> terms;
  add_terms(t, node, terms);
  bool acc = false;
  for (int term : terms) {
    const EpiNode& n = t.nodes[term];
    if (n.op == EpiOp::kOperand) {
      int& slot = v.operands[n.operand].full ? f.residual : f.bias;
      const bool fits = v.operands[n.operand].full ? v.like_output(n.operand) : v.only_along(n.operand, channel_dim);
      if (slot != -1 || !fits) return std::nullopt;
      slot = n.operand;
      continue;
    }
    if (acc) return std::nullopt;
    acc = true;
    if (n.op == EpiOp::kAcc) continue;
    if (n.op != EpiOp::kMul) return std::nullopt;
    const int a = t.args[term][0], b = t.args[term][1];
    const int other = is_op(t, a, EpiOp::kAcc) ? b : is_op(t, b, EpiOp::kAcc) ? a : -1;
    if (other == -1) return std::nullopt;
    if (is_op(t, other, EpiOp::kConst)) {
      f.alpha = t.nodes[other].value;
    } else if (is_op(t, other, EpiOp::kOperand) && v.only_along(t.nodes[other].operand, channel_dim)) {
      f.scale = t.nodes[other].operand;
    } else {
      return std::nullopt;
    }
  }
  if (!acc) return std::nullopt;
  return f;
}

// ---------------------------------------------------------------------------------------------
// The unfused sequence.

namespace {

std::string storage(tmap::DType t) {
  switch (t) {
    case tmap::DType::kFloat16: return "__half";
    case tmap::DType::kBFloat16: return "__nv_bfloat16";
    case tmap::DType::kFloat32: return "float";
    default: throw std::runtime_error("an epilogue operand of dtype " + std::string(tmap::dtype_name(t)));
  }
}

/// Each function as a framework's elementwise kernel computes it, in float32.
const char* kFunctions = R"(
__device__ float f_min(float a, float b) { return fminf(a, b); }
__device__ float f_max(float a, float b) { return fmaxf(a, b); }
__device__ float f_relu(float x) { return fmaxf(x, 0.0f); }
__device__ float f_leaky_relu(float x, float s) { return x >= 0.0f ? x : x * s; }
__device__ float f_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
__device__ float f_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ float f_tanh(float x) { return tanhf(x); }
__device__ float f_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ float f_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ float f_gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))); }
)";

/// Plans and writes the passes: each chain node that starts a pass becomes a kernel.
class PassWriter {
 public:
  PassWriter(const Compute& c, const EpilogueView& v) : c_(c), v_(v), t_(epilogue_tree(c.epilogue)) {}

  /// The kernels' source and, per pass, where its inputs come from.
  std::string write(std::vector<std::vector<int>>& inputs) {
    std::ostringstream os;
    os << "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" << kFunctions;
    plan(t_.root, os);
    inputs = inputs_;
    return os.str();
  }

 private:
  /// Emits the pass computing chain node `node`; returns its index.
  int plan(int node, std::ostringstream& os) {
    std::vector<int> sources;  // -1: contraction; else a pass
    const std::string value = expr(node, sources, os);
    const int index = static_cast<int>(inputs_.size());
    const tmap::Tensor& out = c_.tensor_of(c_.output);
    const std::string T = storage(out.dtype);
    os << "extern \"C\" __global__ void __launch_bounds__(256) pass" << index << "(" << T << "* __restrict__ y";
    for (std::size_t i = 0; i < 4; ++i) os << ", const " << T << "* __restrict__ in" << i;
    for (std::size_t i = 0; i < c_.epilogue.operands.size(); ++i)
      os << ", const " << storage(c_.tensor_of(c_.epilogue.operands[i]).dtype) << "* __restrict__ e" << i;
    std::int64_t total = 1;
    for (auto s : v_.out_shape) total *= s;
    os << ") {\n  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
       << "  if (i >= " << total << "LL) return;\n  long long r = i;\n";
    for (std::size_t d = v_.out_shape.size(); d-- > 0;)
      os << "  const long long d" << d << " = r % " << v_.out_shape[d] << "LL; r /= " << v_.out_shape[d] << "LL;\n";
    os << "  (void)r;\n  y[i] = (" << T << ")(" << value << ");\n}\n\n";
    inputs_.push_back(sources);
    return index;
  }

  /// A broadcast operand subtree: none of its operands is full-shape.
  bool broadcast(int node) const {
    if (t_.nodes[node].op == EpiOp::kOperand) return !v_.operands[t_.nodes[node].operand].full;
    for (int a : t_.args[node])
      if (!broadcast(a)) return false;
    return true;
  }

  /// Whether chain node `child` is computed in its parent's pass: a multiply (or divide) by a
  /// broadcast operand under the add (or subtract) of one, as a folded BatchNorm is one kernel.
  bool merged(int parent, int child) const {
    auto one_chain_rest_broadcast = [&](int n) {
      int chains = 0;
      for (int a : t_.args[n]) chains += t_.chain[a] ? 1 : 0;
      for (int a : t_.args[n])
        if (!t_.chain[a] && !broadcast(a)) return false;
      return chains == 1;
    };
    const EpiOp p = t_.nodes[parent].op, ch = t_.nodes[child].op;
    return (p == EpiOp::kAdd || p == EpiOp::kSub) && (ch == EpiOp::kMul || ch == EpiOp::kDiv) &&
           one_chain_rest_broadcast(parent) && one_chain_rest_broadcast(child);
  }

  /// The float expression of `node` within the pass being written; chain values from other
  /// passes or the contraction are read through in<k>.
  std::string expr(int node, std::vector<int>& sources, std::ostringstream& os) {
    const EpiNode& n = t_.nodes[node];
    auto input = [&](int source) {
      auto it = std::find(sources.begin(), sources.end(), source);
      if (it == sources.end()) {
        if (sources.size() == 4) throw std::runtime_error("an epilogue pass with more than 4 inputs");
        sources.push_back(source);
        it = sources.end() - 1;
      }
      return "(float)in" + std::to_string(it - sources.begin()) + "[i]";
    };
    if (n.op == EpiOp::kAcc) return input(-1);
    if (n.op == EpiOp::kConst) return tmap::epi_constant_code(n.value, false);
    if (n.op == EpiOp::kOperand) {
      const OperandView& o = v_.operands[n.operand];
      std::string at = std::to_string(o.base) + "LL";
      for (std::size_t d = 0; d < o.stride.size(); ++d)
        if (o.stride[d]) at += " + d" + std::to_string(d) + " * " + std::to_string(o.stride[d]) + "LL";
      return "(float)e" + std::to_string(n.operand) + "[" + at + "]";
    }
    std::vector<std::string> a;
    for (int arg : t_.args[node]) {
      if (t_.chain[arg] && t_.nodes[arg].op != EpiOp::kAcc && !merged(node, arg))
        a.push_back(input(plan(arg, os)));
      else
        a.push_back(expr(arg, sources, os));
    }
    return tmap::epi_op_code(n.op, a, "f_");
  }

  const Compute& c_;
  const EpilogueView& v_;
  EpiTree t_;
  std::vector<std::vector<int>> inputs_;
};

}  // namespace

std::string unfused_source(const Compute& c, const EpilogueView& v, std::vector<std::vector<int>>& inputs) {
  return PassWriter(c, v).write(inputs);
}

}  // namespace bench
