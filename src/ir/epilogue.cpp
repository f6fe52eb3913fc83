#include "tmap/ir/epilogue.h"

#include <cmath>
#include <cfloat>
#include <cstdio>

namespace tmap {
namespace {

struct FunctionInfo {
  EpiOp op;
  const char* name;
  int arity;
  const char* args;
};

// The functions of epilogue text; the operators + - * / and unary minus are not listed.
constexpr FunctionInfo kFunctions[] = {
    {EpiOp::kMin, "min", 2, "x, y"},
    {EpiOp::kMax, "max", 2, "x, y"},
    {EpiOp::kClamp, "clamp", 3, "x, lo, hi"},
    {EpiOp::kRelu, "relu", 1, "x"},
    {EpiOp::kLeakyRelu, "leaky_relu", 2, "x, slope"},
    {EpiOp::kSigmoid, "sigmoid", 1, "x"},
    {EpiOp::kTanh, "tanh", 1, "x"},
    {EpiOp::kSilu, "silu", 1, "x"},
    {EpiOp::kGelu, "gelu", 1, "x"},
    {EpiOp::kGeluTanh, "gelu_tanh", 1, "x"},
};

}  // namespace

int epi_arity(EpiOp op) {
  switch (op) {
    case EpiOp::kAcc:
    case EpiOp::kOperand:
    case EpiOp::kConst: return 0;
    case EpiOp::kNeg: return 1;
    case EpiOp::kAdd:
    case EpiOp::kSub:
    case EpiOp::kMul:
    case EpiOp::kDiv: return 2;
    default: break;
  }
  for (const auto& f : kFunctions)
    if (f.op == op) return f.arity;
  return 0;
}

std::optional<EpiOp> epi_function(std::string_view name) {
  for (const auto& f : kFunctions)
    if (name == f.name) return f.op;
  return std::nullopt;
}

std::string_view epi_function_name(EpiOp op) {
  for (const auto& f : kFunctions)
    if (f.op == op) return f.name;
  return {};
}

std::string epi_function_list() {
  std::string out;
  for (const auto& f : kFunctions) out += (out.empty() ? "" : ", ") + std::string(f.name) + "(" + f.args + ")";
  return out;
}

std::string epilogue_program_error(const std::vector<EpiNode>& program, std::size_t operands) {
  if (program.empty()) return "an empty expression";
  if (program.size() > kMaxEpilogueNodes)
    return "more than " + std::to_string(kMaxEpilogueNodes) + " terms";
  std::size_t depth = 0;
  for (const EpiNode& n : program) {
    const int arity = epi_arity(n.op);
    if (n.op == EpiOp::kOperand && (n.operand < 0 || static_cast<std::size_t>(n.operand) >= operands))
      return "operand " + std::to_string(n.operand) + " of " + std::to_string(operands);
    if (n.op == EpiOp::kConst && !(std::fabs(n.value) <= FLT_MAX)) return "a constant beyond float32's range";
    if (arity == 0 && n.op != EpiOp::kAcc && n.op != EpiOp::kOperand && n.op != EpiOp::kConst)
      return "an unknown operation";
    if (depth < static_cast<std::size_t>(arity)) return "an operation without its arguments";
    depth = depth - arity + 1;
  }
  if (depth != 1) return "a program that leaves " + std::to_string(depth) + " values";
  return {};
}

std::string epi_op_code(EpiOp op, const std::vector<std::string>& a, std::string_view prefix) {
  switch (op) {
    case EpiOp::kNeg: return "(-" + a[0] + ")";
    case EpiOp::kAdd: return "(" + a[0] + " + " + a[1] + ")";
    case EpiOp::kSub: return "(" + a[0] + " - " + a[1] + ")";
    case EpiOp::kMul: return "(" + a[0] + " * " + a[1] + ")";
    case EpiOp::kDiv: return "(" + a[0] + " / " + a[1] + ")";
    default: break;
  }
  std::string call = std::string(prefix) + std::string(epi_function_name(op)) + "(";
  for (std::size_t i = 0; i < a.size(); ++i) call += (i ? ", " : "") + a[i];
  return call + ")";
}

std::string epi_constant_code(double v, bool wide) {
  char buf[64];
  if (wide) {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(v)));
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a floating literal, not an int
  if (!wide) s += "f";
  return v < 0 ? "(" + s + ")" : s;
}

}  // namespace tmap
