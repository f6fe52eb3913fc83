#include "tmap/frontend/parser.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <optional>

namespace tmap {
namespace {

enum class Tok {
  kEnd, kName, kInt, kNumber, kLBracket, kRBracket, kLParen, kRParen, kComma,
  kPlus, kMinus, kStar, kSlash, kPercent, kPlusAssign, kAssign,
  kEq, kNe, kLt, kLe, kGt, kGe,
};

struct Token {
  Tok kind = Tok::kEnd;
  std::size_t offset = 0;
  std::size_t length = 0;
  std::string_view text;
};

const char* describe(Tok t) {
  switch (t) {
    case Tok::kEnd: return "end of text";
    case Tok::kName: return "a name";
    case Tok::kInt: return "an integer";
    case Tok::kNumber: return "a number";
    case Tok::kLBracket: return "'['";
    case Tok::kRBracket: return "']'";
    case Tok::kLParen: return "'('";
    case Tok::kRParen: return "')'";
    case Tok::kComma: return "','";
    case Tok::kPlus: return "'+'";
    case Tok::kMinus: return "'-'";
    case Tok::kStar: return "'*'";
    case Tok::kSlash: return "'/'";
    case Tok::kPercent: return "'%'";
    case Tok::kPlusAssign: return "'+='";
    case Tok::kAssign: return "'='";
    case Tok::kEq: return "'=='";
    case Tok::kNe: return "'!='";
    case Tok::kLt: return "'<'";
    case Tok::kLe: return "'<='";
    case Tok::kGt: return "'>'";
    case Tok::kGe: return "'>='";
  }
  return "?";
}

class Parser {
 public:
  /// `numbers`: decimal fractions and exponents are read as kNumber (epilogue text).
  Parser(std::string_view text, const Locator& locate, bool numbers = false)
      : text_(text), locate_(locate), numbers_(numbers) {
    lex();
  }

  EpilogueDecl epilogue() {
    EpilogueDecl e;
    e.output = access("the epilogue's result (e.g. 'Y[i, j]')");
    if (!accept(Tok::kAssign))
      fail(peek(), "expected '=' after the epilogue's result, found " + found(peek()),
           "an epilogue is 'Y[...] = f(Out[...], ...)' with Out the contraction's output");
    e.expr = value();
    if (peek().kind != Tok::kEnd) fail(peek(), "unexpected " + found(peek()) + " after the epilogue");
    return e;
  }

  StatementDecl statement() {
    StatementDecl s;
    s.output = access("the output access (e.g. 'Out[i, j]')");
    if (accept(Tok::kPlusAssign)) {
      s.update = UpdateKind::kAccumulate;
    } else if (accept(Tok::kAssign)) {
      s.update = UpdateKind::kAssign;
    } else {
      fail(peek(), "expected '+=' or '=' after the output access, found " + found(peek()),
           "a compute is one statement 'Out[...] += X[...] * Y[...]'");
    }
    s.inputs.push_back(access("an input access after '" + std::string(s.update == UpdateKind::kAccumulate ? "+=" : "=") + "'"));
    while (accept(Tok::kStar)) s.inputs.push_back(access("an input access after '*'"));
    if (peek().kind != Tok::kEnd)
      fail(peek(), "unexpected " + found(peek()) + " after the statement",
           "the right-hand side is a product of tensor accesses: 'X[...] * Y[...]'");
    return s;
  }

  Expr full_expression(bool allow_comparison) {
    if (peek().kind == Tok::kEnd) fail(peek(), "expected an expression, found nothing");
    Expr e = expression(allow_comparison);
    if (peek().kind != Tok::kEnd) fail(peek(), "unexpected " + found(peek()) + " after the expression");
    return e;
  }

 private:
  void lex() {
    for (std::size_t i = 0; i < text_.size();) {
      if (std::isspace(static_cast<unsigned char>(text_[i]))) {
        ++i;
        continue;
      }
      Token t = token_at(i);
      t.text = text_.substr(t.offset, t.length);
      if (t.kind == Tok::kName && t.length > kMaxNameLength)
        fail_at(t.offset, t.length, "a name of " + std::to_string(t.length) + " characters; at most " +
                                        std::to_string(kMaxNameLength) + " are allowed");
      if (tokens_.size() == kMaxTokens)
        fail_at(t.offset, t.length, "more than " + std::to_string(kMaxTokens) + " tokens",
                "a statement or an index expression is short; split the computation");
      tokens_.push_back(t);
      i += t.length;
    }
    tokens_.push_back(Token{Tok::kEnd, text_.size(), 1, {}});
  }

  /// The token that starts at `i` (not a space): its kind and length.
  Token token_at(std::size_t i) const {
    const char c = text_[i];
    Token t;
    t.offset = i;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) || text_[j] == '_')) ++j;
      t.kind = Tok::kName;
      t.length = j - i;
    } else if (numbers_ && std::isdigit(static_cast<unsigned char>(c))) {
      t.length = number_length(i);
      // Whole numbers are integers, which indices take too.
      t.kind = text_.substr(i, t.length).find_first_not_of("0123456789") == std::string_view::npos ? Tok::kInt
                                                                                                  : Tok::kNumber;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < text_.size() && std::isdigit(static_cast<unsigned char>(text_[j]))) ++j;
      if (j < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[j])) || text_[j] == '_' || text_[j] == '.'))
        fail_at(i, j + 1 - i, "malformed number '" + std::string(text_.substr(i, j + 1 - i)) + "'",
                "numbers are decimal integers; write a product as '2*x'");
      t.kind = Tok::kInt;
      t.length = j - i;
    } else {
      const auto [kind, length] = operator_at(i);
      t.kind = kind;
      t.length = length;
    }
    return t;
  }

  /// The operator or bracket at `i`, and its length (two-character operators first).
  std::pair<Tok, std::size_t> operator_at(std::size_t i) const {
    struct Op {
      std::string_view s;
      Tok k;
    };
    static constexpr Op kOps[] = {
        {"+=", Tok::kPlusAssign}, {"==", Tok::kEq}, {"!=", Tok::kNe}, {"<=", Tok::kLe},
        {">=", Tok::kGe}, {"[", Tok::kLBracket}, {"]", Tok::kRBracket}, {"(", Tok::kLParen},
        {")", Tok::kRParen}, {",", Tok::kComma}, {"+", Tok::kPlus}, {"-", Tok::kMinus},
        {"*", Tok::kStar}, {"/", Tok::kSlash}, {"%", Tok::kPercent}, {"=", Tok::kAssign},
        {"<", Tok::kLt}, {">", Tok::kGt}};
    const auto two = text_.substr(i, 2);
    for (const auto& op : kOps)
      if (op.s.size() == 2 ? two == op.s : text_[i] == op.s[0]) return {op.k, op.s.size()};
    fail_at(i, 1, std::string("unexpected character '") + text_[i] + "'",
            "expressions use names, integers, + - * / %, parentheses and brackets");
  }

  /// Bytes of the decimal number at `i`: digits, an optional fraction, an optional exponent.
  std::size_t number_length(std::size_t i) const {
    auto digit = [&](std::size_t j) { return j < text_.size() && std::isdigit(static_cast<unsigned char>(text_[j])); };
    std::size_t j = i;
    while (digit(j)) ++j;
    if (j < text_.size() && text_[j] == '.')
      for (++j; digit(j);) ++j;
    if (j < text_.size() && (text_[j] == 'e' || text_[j] == 'E')) {
      std::size_t k = j + 1;
      if (k < text_.size() && (text_[k] == '+' || text_[k] == '-')) ++k;
      if (digit(k)) {
        for (j = k; digit(j);) ++j;
      }
    }
    if (j < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[j])) || text_[j] == '_' || text_[j] == '.'))
      fail_at(i, j + 1 - i, "malformed number '" + std::string(text_.substr(i, j + 1 - i)) + "'",
              "numbers are decimal, such as 0.5, 6 or 1e-3");
    return j - i;
  }

  /// One level deeper while it lives; `recurses` (the token opens a nested expression) at the
  /// deepest level allowed is an error.
  struct Nest {
    int& d;
    explicit Nest(int& depth) : d(++depth) {}
    Nest(const Nest&) = delete;
    ~Nest() { --d; }
  };
  Nest nested(const Token& t, bool recurses) {
    if (recurses && depth_ == kMaxNesting)
      fail(t, "an expression nested more than " + std::to_string(kMaxNesting) + " levels deep",
           "remove redundant parentheses and signs");
    return Nest(depth_);
  }

  const Token& peek() const { return tokens_[pos_]; }
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool accept(Tok k) {
    if (peek().kind != k) return false;
    next();
    return true;
  }

  std::string found(const Token& t) const {
    if (t.kind == Tok::kEnd) return "end of text";
    return "'" + std::string(t.text) + "'";
  }

  SourceLoc loc(std::size_t begin, std::size_t end) const {
    return locate_(begin, end > begin ? end - begin : 1);
  }

  [[noreturn]] void fail_at(std::size_t offset, std::size_t length, const std::string& msg,
                            const std::string& hint = {}) const {
    throw_user_error(locate_(offset, length), msg, hint);
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg, const std::string& hint = {}) const {
    fail_at(t.offset, t.length, msg, hint);
  }

  void expect(Tok k, const std::string& context) {
    if (!accept(k)) fail(peek(), std::string("expected ") + describe(k) + " " + context + ", found " + found(peek()));
  }

  AccessDecl access(const std::string& what) {
    const Token& name = peek();
    if (name.kind != Tok::kName) fail(name, "expected " + what + ", found " + found(name));
    next();
    AccessDecl a;
    a.tensor = std::string(name.text);
    a.loc = loc(name.offset, name.offset + name.length);
    expect(Tok::kLBracket, "after tensor name '" + a.tensor + "'");
    if (peek().kind == Tok::kRBracket)
      fail(peek(), "tensor '" + a.tensor + "' is indexed with no index", "write one index per dimension, e.g. 'X[i, j]'");
    a.indices.push_back(expression(false));
    while (accept(Tok::kComma)) a.indices.push_back(expression(false));
    expect(Tok::kRBracket, "to close the indices of '" + a.tensor + "'");
    return a;
  }

  Expr expression(bool allow_comparison) {
    std::size_t begin = peek().offset;
    Expr lhs = sum();
    static constexpr std::pair<Tok, ExprKind> kCmp[] = {
        {Tok::kEq, ExprKind::kEq}, {Tok::kNe, ExprKind::kNe}, {Tok::kLt, ExprKind::kLt},
        {Tok::kLe, ExprKind::kLe}, {Tok::kGt, ExprKind::kGt}, {Tok::kGe, ExprKind::kGe}};
    for (const auto& [tok, kind] : kCmp) {
      if (peek().kind != tok) continue;
      if (!allow_comparison)
        fail(peek(), "a comparison " + found(peek()) + " is not allowed here",
             "comparisons belong in \"requires\"");
      next();
      Expr rhs = sum();
      return ExprNode::make_binary(kind, lhs, rhs, loc(begin, prev_end()));
    }
    return lhs;
  }

  std::size_t prev_end() const {
    const Token& t = tokens_[pos_ > 0 ? pos_ - 1 : 0];
    return t.offset + t.length;
  }

  Expr sum() {
    std::size_t begin = peek().offset;
    Expr e = term();
    for (;;) {
      ExprKind k;
      if (accept(Tok::kPlus)) k = ExprKind::kAdd;
      else if (accept(Tok::kMinus)) k = ExprKind::kSub;
      else return e;
      Expr rhs = term();
      e = ExprNode::make_binary(k, e, rhs, loc(begin, prev_end()));
    }
  }

  Expr term() {
    std::size_t begin = peek().offset;
    Expr e = unary();
    for (;;) {
      ExprKind k;
      if (accept(Tok::kStar)) k = ExprKind::kMul;
      else if (accept(Tok::kSlash)) k = ExprKind::kDiv;
      else if (accept(Tok::kPercent)) k = ExprKind::kMod;
      else return e;
      Expr rhs = unary();
      e = ExprNode::make_binary(k, e, rhs, loc(begin, prev_end()));
    }
  }

  Expr unary() {
    const Token t = peek();
    // Parentheses and signs recurse; everything that walks the expression later does too.
    const Nest nest = nested(t, t.kind == Tok::kMinus || t.kind == Tok::kLParen);
    switch (t.kind) {
      case Tok::kMinus: {
        next();
        Expr a = unary();
        return ExprNode::make_unary(ExprKind::kNeg, a, loc(t.offset, prev_end()));
      }
      case Tok::kInt: {
        next();
        std::int64_t v = 0;
        auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc()) fail(t, "integer '" + std::string(t.text) + "' does not fit in 64 bits");
        return ExprNode::make_int(v, loc(t.offset, t.offset + t.length));
      }
      case Tok::kName:
        next();
        if (peek().kind == Tok::kLBracket)
          fail(t, "tensor access '" + std::string(t.text) + "[...]' inside an index",
               "indices are affine expressions of iterators and parameters; indirect indexing is not supported");
        return ExprNode::make_var(std::string(t.text), loc(t.offset, t.offset + t.length));
      case Tok::kLParen: {
        next();
        Expr e = expression(false);
        expect(Tok::kRParen, "to close '('");
        return e;
      }
      default:
        fail(t, "expected a name, an integer or '(', found " + found(t));
    }
  }

  // ---- Epilogue values ----

  using Node = EpiExprDecl;
  EpiExprPtr make(EpiOp op, std::vector<EpiExprPtr> args, std::size_t begin) {
    auto n = std::make_shared<Node>();
    n->op = op;
    n->args = std::move(args);
    n->loc = loc(begin, prev_end());
    return n;
  }

  EpiExprPtr value() {
    const std::size_t begin = peek().offset;
    EpiExprPtr e = product();
    for (;;) {
      EpiOp op;
      if (accept(Tok::kPlus)) op = EpiOp::kAdd;
      else if (accept(Tok::kMinus)) op = EpiOp::kSub;
      else return e;
      EpiExprPtr rhs = product();
      e = make(op, {e, rhs}, begin);
    }
  }

  EpiExprPtr product() {
    const std::size_t begin = peek().offset;
    EpiExprPtr e = factor();
    for (;;) {
      EpiOp op;
      if (accept(Tok::kStar)) op = EpiOp::kMul;
      else if (accept(Tok::kSlash)) op = EpiOp::kDiv;
      else return e;
      EpiExprPtr rhs = factor();
      e = make(op, {e, rhs}, begin);
    }
  }

  EpiExprPtr number(const Token& t, bool negative, std::size_t begin) {
    auto n = std::make_shared<Node>();
    n->op = EpiOp::kConst;
    auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), n->value);
    if (ec != std::errc() || !(n->value <= 3.4028234663852886e38))
      fail(t, "number '" + std::string(t.text) + "' is beyond float32's range");
    if (negative) n->value = -n->value;
    n->loc = loc(begin, t.offset + t.length);
    return n;
  }

  EpiExprPtr factor() {
    const Token t = peek();
    const Nest nest = nested(t, t.kind == Tok::kMinus || t.kind == Tok::kLParen || t.kind == Tok::kName);
    switch (t.kind) {
      case Tok::kMinus: {
        next();
        if (peek().kind == Tok::kNumber || peek().kind == Tok::kInt) return number(next(), true, t.offset);
        EpiExprPtr a = factor();
        return make(EpiOp::kNeg, {a}, t.offset);
      }
      case Tok::kNumber:
      case Tok::kInt: return number(next(), false, t.offset);
      case Tok::kLParen: {
        next();
        EpiExprPtr e = value();
        expect(Tok::kRParen, "to close '('");
        return e;
      }
      case Tok::kName: {
        if (tokens_[pos_ + 1].kind == Tok::kLBracket) {
          auto n = std::make_shared<Node>();
          n->op = EpiOp::kOperand;
          n->access = access("a tensor access");
          n->loc = n->access.loc;
          return n;
        }
        next();
        const std::optional<EpiOp> f = epi_function(t.text);
        if (!f)
          fail(t, "'" + std::string(t.text) + "' is neither a function nor a tensor access",
               "an epilogue reads tensors as 'X[i, j]' and calls " + epi_function_list());
        expect(Tok::kLParen, "after function '" + std::string(t.text) + "'");
        std::vector<EpiExprPtr> args{value()};
        while (accept(Tok::kComma)) args.push_back(value());
        expect(Tok::kRParen, "to close the arguments of '" + std::string(t.text) + "'");
        const int arity = epi_arity(*f);
        if (static_cast<int>(args.size()) != arity)
          fail(t, "'" + std::string(t.text) + "' takes " + std::to_string(arity) + " argument" + (arity == 1 ? "" : "s") +
                      ", not " + std::to_string(args.size()),
               "the functions are " + epi_function_list());
        return make(*f, std::move(args), t.offset);
      }
      default:
        fail(t, "expected a number, a tensor access, a function call or '(', found " + found(t));
    }
  }

  static constexpr std::size_t kMaxTokens = 4096;
  static constexpr int kMaxNesting = 64;

  std::string_view text_;
  const Locator& locate_;
  std::vector<Token> tokens_;
  bool numbers_ = false;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string name_problem(std::string_view name) {
  if (name.size() > kMaxNameLength)
    return "a name of " + std::to_string(name.size()) + " characters; at most " + std::to_string(kMaxNameLength) +
           " are allowed";
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      return "a name with a control character (" + std::string(code) + " at byte " + std::to_string(i) + ")";
    }
  }
  return {};
}

Locator locator_for(const SourceText& text) {
  return [&text](std::size_t offset, std::size_t length) { return text.at(offset, length); };
}

StatementDecl parse_statement(std::string_view text, const Locator& locate) {
  return Parser(text, locate).statement();
}

EpilogueDecl parse_epilogue(std::string_view text, const Locator& locate) {
  return Parser(text, locate, true).epilogue();
}

Expr parse_expression(std::string_view text, const Locator& locate, bool allow_comparison) {
  return Parser(text, locate).full_expression(allow_comparison);
}

}  // namespace tmap
