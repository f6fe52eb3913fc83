// Elementwise work after the contraction: a fused epilogue.
//
//   Out[n, p, q, k] += I[...] * W[...]
//   Y[n, p, q, k] = relu(Out[n, p, q, k] * scale[k] + bias[k] + R[n, p, q, k])
//
// The contraction's value (`Out`, in the accumulation dtype) is never stored: the kernel applies
// the expression to it in float32 and stores the result, rounded once, as the output tensor Y
// (indexed exactly as Out). Operands are read at affine indices of the output's iterators, so
// they broadcast along any subset of them (a per-channel bias, a per-tensor scale, a residual of
// the output's shape), and are always in bounds (checked when the compute is built).
//
// The expression is kept as a postfix program of EpiNodes, so that equal epilogues compare
// equal; Compute::epilogue (ir/compute.h) holds it with its operands.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>


namespace tmap {

enum class EpiOp {
  kAcc,      ///< The contraction's value.
  kOperand,  ///< Operand `operand`'s element.
  kConst,    ///< `value`.
  kNeg, kAdd, kSub, kMul, kDiv,
  kMin, kMax, kClamp,                  ///< clamp(x, lo, hi) = min(max(x, lo), hi)
  kRelu, kLeakyRelu,                   ///< leaky_relu(x, slope)
  kSigmoid, kTanh, kSilu, kGelu, kGeluTanh,
};

struct EpiNode {
  EpiOp op = EpiOp::kAcc;
  int operand = -1;  ///< kOperand: index into Epilogue::operands.
  double value = 0;  ///< kConst.
  bool operator==(const EpiNode&) const = default;
};

/// How many values an op takes from the stack.
int epi_arity(EpiOp op);
/// The function called `name` in epilogue text ("relu", "gelu_tanh", ...), if any.
std::optional<EpiOp> epi_function(std::string_view name);
/// The name of a function op, or "" for leaves and operators.
std::string_view epi_function_name(EpiOp op);
/// Every function's name with its arguments, for messages and `tmap ops`.
std::string epi_function_list();

/// The most nodes an epilogue's program holds (a kernel inlines all of it at every store).
inline constexpr std::size_t kMaxEpilogueNodes = 256;

/// Whether `program` is a well-formed postfix expression over `operands` operands: every op has
/// its arguments, one value is left, constants are finite. Returns the reason when not.
std::string epilogue_program_error(const std::vector<EpiNode>& program, std::size_t operands);

/// Folds the postfix program into one value: `leaf` gives the code (or value) of kAcc, kOperand
/// and kConst nodes, `apply` combines an op's arguments. Used by every code generator and by the
/// text printer, each with its own spelling of the functions.
template <typename T>
T fold_epilogue(const std::vector<EpiNode>& program, const std::function<T(const EpiNode&)>& leaf,
                const std::function<T(EpiOp, std::vector<T>&)>& apply) {
  std::vector<T> stack;
  for (const EpiNode& n : program) {
    const int arity = epi_arity(n.op);
    if (arity == 0) {
      stack.push_back(leaf(n));
      continue;
    }
    std::vector<T> args(stack.end() - arity, stack.end());
    stack.resize(stack.size() - arity);
    stack.push_back(apply(n.op, args));
  }
  return stack.back();
}

/// Op `op` applied to C expressions `args`: + - * / and unary - as operators, every function as a
/// call of `prefix` + its name ("epi_relu(x)"); each code generator defines its own functions.
std::string epi_op_code(EpiOp op, const std::vector<std::string>& args, std::string_view prefix);

/// A float32 (or double, with `wide`) constant in C source: exact round-trip digits.
std::string epi_constant_code(double v, bool wide);

}  // namespace tmap
