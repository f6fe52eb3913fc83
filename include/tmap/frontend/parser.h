// Parser of the compute language's text: statements and integer expressions.
//
//   statement := access ('+=' | '=') access ('*' access)*
//   access    := NAME '[' expr (',' expr)* ']'
//   expr      := sum (('==' | '!=' | '<' | '<=' | '>' | '>=') sum)?   (comparisons on request)
//   sum       := term (('+' | '-') term)*
//   term      := unary (('*' | '/' | '%') unary)*
//   unary     := '-' unary | INT | NAME | '(' expr ')'
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tmap/ir/compute.h"
#include "tmap/ir/epilogue.h"
#include "tmap/ir/expr.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

/// The longest name accepted anywhere in an input: iterators, tensors, parameters, computes and
/// workloads.
inline constexpr std::size_t kMaxNameLength = 256;

/// Why a name (of a compute, a workload or a log record) cannot be taken, or "" when it can: at
/// most kMaxNameLength bytes, and no control characters, which would reach a terminal when the
/// name is printed.
std::string name_problem(std::string_view name);

/// Maps a byte range of the text being parsed to a location in the user's file (the text may
/// be a string inside a JSON file, or a command-line argument).
using Locator = std::function<SourceLoc(std::size_t offset, std::size_t length)>;

/// A Locator for a text that is its own whole file.
Locator locator_for(const SourceText& text);

struct AccessDecl {
  std::string tensor;
  std::vector<Expr> indices;
  SourceLoc loc;  ///< The tensor name.
};

struct StatementDecl {
  AccessDecl output;
  UpdateKind update = UpdateKind::kAccumulate;
  std::vector<AccessDecl> inputs;
};

/// A node of an epilogue expression as written (kAcc is not used: the contraction's value is an
/// access whose tensor the loader recognizes).
struct EpiExprDecl {
  EpiOp op = EpiOp::kConst;
  AccessDecl access;  ///< kOperand: a tensor access.
  double value = 0;   ///< kConst.
  std::vector<std::shared_ptr<const EpiExprDecl>> args;
  SourceLoc loc;
};
using EpiExprPtr = std::shared_ptr<const EpiExprDecl>;

/// "Y[n, k] = relu(Out[n, k] * scale[k] + bias[k])": the epilogue's result and its expression.
struct EpilogueDecl {
  AccessDecl output;
  EpiExprPtr expr;
};

/// Parses an epilogue statement:
///   epilogue := access '=' value
///   value    := product (('+' | '-') product)*
///   product  := factor (('*' | '/') factor)*
///   factor   := '-' factor | NUMBER | NAME '(' value (',' value)* ')' | access | '(' value ')'
/// NUMBER is decimal with an optional fraction and exponent; '-' before a number is its sign.
EpilogueDecl parse_epilogue(std::string_view text, const Locator& locate);

/// Parses a statement such as "Out[n, k, p, q] += I[n, c, p*stride + r, q + s] * W[k, c, r, s]".
StatementDecl parse_statement(std::string_view text, const Locator& locate);

/// Parses one integer expression; comparisons only when allowed (requirements).
Expr parse_expression(std::string_view text, const Locator& locate, bool allow_comparison = false);

}  // namespace tmap
