// Integer expressions of the compute language: tensor shapes, iterator extents, requirements
// (over parameters), and tensor indices (affine in iterators, see AffineExpr).
//
// Semantics: 64-bit signed integers; every operation is checked and overflow is a user error.
// `/` and `%` are floor division and its remainder (Python's), defined for parameters only.
// Comparisons yield 1 or 0 and are allowed only in requirements.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tmap/support/diagnostic.h"

namespace tmap {

enum class ExprKind { kInt, kVar, kNeg, kAdd, kSub, kMul, kDiv, kMod, kEq, kNe, kLt, kLe, kGt, kGe };

struct ExprNode;
/// Immutable, shared expression tree.
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprKind kind;
  std::int64_t value = 0;  ///< kInt
  std::string name;        ///< kVar
  Expr a, b;               ///< Operands (b unused for kNeg).
  SourceLoc loc;           ///< Where the whole (sub)expression was written.

  static Expr make_int(std::int64_t v, SourceLoc loc = {});
  static Expr make_var(std::string name, SourceLoc loc = {});
  static Expr make_unary(ExprKind kind, Expr a, SourceLoc loc = {});
  static Expr make_binary(ExprKind kind, Expr a, Expr b, SourceLoc loc = {});
};

/// Prints an expression with minimal parentheses ("p*stride + r*dil - pad").
std::string to_string(const Expr& e);

/// Calls f(name, loc) for each variable occurrence, left to right.
template <typename F>
void visit_vars(const Expr& e, F&& f) {
  if (!e) return;
  if (e->kind == ExprKind::kVar) f(e->name, e->loc);
  visit_vars(e->a, f);
  visit_vars(e->b, f);
}

using ParamValues = std::map<std::string, std::int64_t>;

/// Evaluates an expression over parameters; `what` names the expression's role for messages
/// ("dimension 2 of tensor I"). Unknown names, division by zero and overflow are user errors.
std::int64_t evaluate(const Expr& e, const ParamValues& params, const std::string& what);

/// An affine function of iterators: constant + sum(coef * iterator). Terms are sorted by
/// iterator id and have non-zero coefficients, so equal functions compare equal.
struct AffineExpr {
  std::int64_t constant = 0;
  std::vector<std::pair<int, std::int64_t>> terms;  ///< (iterator id, coefficient)

  std::int64_t coef(int iter) const;
  bool uses(int iter) const { return coef(iter) != 0; }
  /// The iterator id when the expression is exactly one iterator with coefficient 1 and no
  /// constant (an iterator that indexes a dimension "directly"), else -1.
  int direct_iterator() const;
  bool operator==(const AffineExpr&) const = default;
};

/// Normalises an index expression to affine form: names found in `params` are constants,
/// names found in `iterators` (name -> id) are iterators. A product of two iterator terms, or an
/// iterator under `/` or `%`, is a user error ("non-affine index").
AffineExpr to_affine(const Expr& e, const ParamValues& params,
                     const std::map<std::string, int>& iterators, const std::string& what);

/// Prints an affine expression using iterator names ("p + r - 1").
std::string to_string(const AffineExpr& e, const std::vector<std::string>& iterator_names);

}  // namespace tmap
