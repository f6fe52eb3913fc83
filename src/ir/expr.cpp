#include "tmap/ir/expr.h"

#include <algorithm>

namespace tmap {
namespace {

int precedence(ExprKind k) {
  switch (k) {
    case ExprKind::kEq: case ExprKind::kNe: case ExprKind::kLt:
    case ExprKind::kLe: case ExprKind::kGt: case ExprKind::kGe:
      return 1;
    case ExprKind::kAdd: case ExprKind::kSub:
      return 2;
    case ExprKind::kMul: case ExprKind::kDiv: case ExprKind::kMod:
      return 3;
    case ExprKind::kNeg:
      return 4;
    case ExprKind::kInt: case ExprKind::kVar:
      return 5;
  }
  return 5;
}

const char* op_text(ExprKind k) {
  switch (k) {
    case ExprKind::kAdd: return " + ";
    case ExprKind::kSub: return " - ";
    case ExprKind::kMul: return "*";
    case ExprKind::kDiv: return "/";
    case ExprKind::kMod: return " % ";
    case ExprKind::kEq: return " == ";
    case ExprKind::kNe: return " != ";
    case ExprKind::kLt: return " < ";
    case ExprKind::kLe: return " <= ";
    case ExprKind::kGt: return " > ";
    case ExprKind::kGe: return " >= ";
    default: return "?";
  }
}

std::string wrap(const Expr& e, bool parens) {
  return parens ? "(" + to_string(e) + ")" : to_string(e);
}

[[noreturn]] void overflow_error(const SourceLoc& loc, const std::string& what) {
  throw_user_error(loc, "integer overflow while evaluating " + what,
                   "the values involved exceed 64-bit integers; use smaller parameters");
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::int64_t floor_mod(std::int64_t a, std::int64_t b) { return a - floor_div(a, b) * b; }

std::int64_t apply(ExprKind k, std::int64_t x, std::int64_t y, const SourceLoc& loc,
                   const std::string& what) {
  std::int64_t r = 0;
  switch (k) {
    case ExprKind::kAdd:
      if (__builtin_add_overflow(x, y, &r)) overflow_error(loc, what);
      return r;
    case ExprKind::kSub:
      if (__builtin_sub_overflow(x, y, &r)) overflow_error(loc, what);
      return r;
    case ExprKind::kMul:
      if (__builtin_mul_overflow(x, y, &r)) overflow_error(loc, what);
      return r;
    case ExprKind::kDiv:
    case ExprKind::kMod:
      if (y == 0) throw_user_error(loc, "division by zero while evaluating " + what,
                                   "check the parameters used as divisors");
      if (x == INT64_MIN && y == -1) overflow_error(loc, what);
      return k == ExprKind::kDiv ? floor_div(x, y) : floor_mod(x, y);
    case ExprKind::kEq: return x == y;
    case ExprKind::kNe: return x != y;
    case ExprKind::kLt: return x < y;
    case ExprKind::kLe: return x <= y;
    case ExprKind::kGt: return x > y;
    case ExprKind::kGe: return x >= y;
    default: TMAP_CHECK(false, "apply() called on a non-binary expression kind");
  }
  return 0;
}

std::string known_names(const ParamValues& params) {
  if (params.empty()) return "this compute has no parameters";
  std::string out = "parameters are: ";
  bool first = true;
  for (const auto& [name, v] : params) {
    out += (first ? "" : ", ") + name;
    first = false;
  }
  return out;
}

}  // namespace

Expr ExprNode::make_int(std::int64_t v, SourceLoc loc) {
  return std::make_shared<const ExprNode>(ExprNode{ExprKind::kInt, v, {}, nullptr, nullptr, std::move(loc)});
}

Expr ExprNode::make_var(std::string name, SourceLoc loc) {
  return std::make_shared<const ExprNode>(
      ExprNode{ExprKind::kVar, 0, std::move(name), nullptr, nullptr, std::move(loc)});
}

Expr ExprNode::make_unary(ExprKind kind, Expr a, SourceLoc loc) {
  TMAP_CHECK(kind == ExprKind::kNeg, "only negation is unary");
  return std::make_shared<const ExprNode>(ExprNode{kind, 0, {}, std::move(a), nullptr, std::move(loc)});
}

Expr ExprNode::make_binary(ExprKind kind, Expr a, Expr b, SourceLoc loc) {
  TMAP_CHECK(precedence(kind) <= 3, "make_binary needs a binary operator");
  return std::make_shared<const ExprNode>(
      ExprNode{kind, 0, {}, std::move(a), std::move(b), std::move(loc)});
}

std::string to_string(const Expr& e) {
  if (!e) return "<null>";
  switch (e->kind) {
    case ExprKind::kInt: return std::to_string(e->value);
    case ExprKind::kVar: return e->name;
    case ExprKind::kNeg: return "-" + wrap(e->a, precedence(e->a->kind) < precedence(e->kind));
    default: {
      int p = precedence(e->kind);
      return wrap(e->a, precedence(e->a->kind) < p) + op_text(e->kind) +
             wrap(e->b, precedence(e->b->kind) <= p);
    }
  }
}

std::int64_t evaluate(const Expr& e, const ParamValues& params, const std::string& what) {
  TMAP_CHECK(e != nullptr, "evaluate() of a null expression");
  switch (e->kind) {
    case ExprKind::kInt: return e->value;
    case ExprKind::kVar: {
      auto it = params.find(e->name);
      if (it == params.end())
        throw_user_error(e->loc, "unknown parameter '" + e->name + "' in " + what,
                         known_names(params));
      return it->second;
    }
    case ExprKind::kNeg: {
      std::int64_t v = evaluate(e->a, params, what);
      return apply(ExprKind::kSub, 0, v, e->loc, what);
    }
    default:
      return apply(e->kind, evaluate(e->a, params, what), evaluate(e->b, params, what), e->loc, what);
  }
}

std::int64_t AffineExpr::coef(int iter) const {
  for (const auto& [id, c] : terms)
    if (id == iter) return c;
  return 0;
}

int AffineExpr::direct_iterator() const {
  if (constant == 0 && terms.size() == 1 && terms[0].second == 1) return terms[0].first;
  return -1;
}

namespace {

AffineExpr affine_combine(const AffineExpr& x, const AffineExpr& y, std::int64_t sign,
                          const SourceLoc& loc, const std::string& what) {
  AffineExpr r;
  r.constant = apply(ExprKind::kAdd, x.constant, apply(ExprKind::kMul, sign, y.constant, loc, what), loc, what);
  std::map<int, std::int64_t> acc;
  for (const auto& [id, c] : x.terms) acc[id] = c;
  for (const auto& [id, c] : y.terms)
    acc[id] = apply(ExprKind::kAdd, acc[id], apply(ExprKind::kMul, sign, c, loc, what), loc, what);
  for (const auto& [id, c] : acc)
    if (c != 0) r.terms.emplace_back(id, c);
  return r;
}

AffineExpr affine_scale(const AffineExpr& x, std::int64_t s, const SourceLoc& loc,
                        const std::string& what) {
  AffineExpr r;
  r.constant = apply(ExprKind::kMul, x.constant, s, loc, what);
  if (s != 0)
    for (const auto& [id, c] : x.terms) r.terms.emplace_back(id, apply(ExprKind::kMul, c, s, loc, what));
  return r;
}

}  // namespace

AffineExpr to_affine(const Expr& e, const ParamValues& params,
                     const std::map<std::string, int>& iterators, const std::string& what) {
  TMAP_CHECK(e != nullptr, "to_affine() of a null expression");
  switch (e->kind) {
    case ExprKind::kInt: return AffineExpr{e->value, {}};
    case ExprKind::kVar: {
      if (auto p = params.find(e->name); p != params.end()) return AffineExpr{p->second, {}};
      auto it = iterators.find(e->name);
      TMAP_CHECK(it != iterators.end(), "name '" + e->name + "' is neither parameter nor iterator");
      return AffineExpr{0, {{it->second, 1}}};
    }
    case ExprKind::kNeg:
      return affine_scale(to_affine(e->a, params, iterators, what), -1, e->loc, what);
    case ExprKind::kAdd:
    case ExprKind::kSub:
      return affine_combine(to_affine(e->a, params, iterators, what),
                            to_affine(e->b, params, iterators, what),
                            e->kind == ExprKind::kAdd ? 1 : -1, e->loc, what);
    case ExprKind::kMul: {
      AffineExpr x = to_affine(e->a, params, iterators, what);
      AffineExpr y = to_affine(e->b, params, iterators, what);
      if (!x.terms.empty() && !y.terms.empty())
        throw_user_error(e->loc, "non-affine index in " + what + ": '" + to_string(e) +
                                     "' multiplies two expressions of iterators",
                         "an index must be a sum of iterators times integer constants or "
                         "parameters, e.g. 'p*stride + r*dil - pad'");
      return x.terms.empty() ? affine_scale(y, x.constant, e->loc, what)
                             : affine_scale(x, y.constant, e->loc, what);
    }
    case ExprKind::kDiv:
    case ExprKind::kMod: {
      AffineExpr x = to_affine(e->a, params, iterators, what);
      AffineExpr y = to_affine(e->b, params, iterators, what);
      if (!x.terms.empty() || !y.terms.empty())
        throw_user_error(e->loc, "non-affine index in " + what + ": '" + to_string(e) +
                                     "' divides an expression of iterators",
                         "'/' and '%' may only combine parameters and integers in an index");
      return AffineExpr{apply(e->kind, x.constant, y.constant, e->loc, what), {}};
    }
    default:
      throw_user_error(e->loc, "a comparison is not allowed in " + what,
                       "comparisons ('==', '<', ...) belong in \"requires\"");
  }
}

std::string to_string(const AffineExpr& e, const std::vector<std::string>& names) {
  std::string out;
  for (const auto& [id, c] : e.terms) {
    std::string name = id >= 0 && id < static_cast<int>(names.size()) ? names[id] : "?";
    std::int64_t mag = c < 0 ? -c : c;
    if (out.empty()) out += c < 0 ? "-" : "";
    else out += c < 0 ? " - " : " + ";
    out += mag == 1 ? name : std::to_string(mag) + "*" + name;
  }
  if (e.constant != 0 || out.empty()) {
    if (out.empty()) out = std::to_string(e.constant);
    else out += (e.constant < 0 ? " - " : " + ") + std::to_string(e.constant < 0 ? -e.constant : e.constant);
  }
  return out;
}

}  // namespace tmap
