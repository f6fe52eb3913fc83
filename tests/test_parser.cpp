// The compute language's text: statements, expressions, evaluation and affine normalisation.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tmap/frontend/parser.h"

namespace tmap {
namespace {

using testing::user_error_of;

StatementDecl statement(const std::string& text) {
  SourceText src("stmt", text);
  return parse_statement(text, locator_for(src));
}

Expr expr(const std::string& text, bool allow_comparison = false) {
  SourceText src("expr", text);
  return parse_expression(text, locator_for(src), allow_comparison);
}

struct StatementCase {
  std::string text;
  std::string output;
  std::vector<std::string> inputs;
  UpdateKind update;
  std::vector<std::string> output_indices;  // printed back
};

TEST(Parser, Statements) {
  const StatementCase cases[] = {
      {"C[m, n] += A[m, k] * B[k, n]", "C", {"A", "B"}, UpdateKind::kAccumulate, {"m", "n"}},
      {"C[m,n]+=A[m,k]*B[k,n]", "C", {"A", "B"}, UpdateKind::kAccumulate, {"m", "n"}},
      {"y[i] = x[i]", "y", {"x"}, UpdateKind::kAssign, {"i"}},
      {"O[i] += X[i] * Y[i] * Z[i]", "O", {"X", "Y", "Z"}, UpdateKind::kAccumulate, {"i"}},
      {"Out[n, g*(K/groups) + k] += I[n, c] * W_t2[k, c]", "Out", {"I", "W_t2"}, UpdateKind::kAccumulate,
       {"n", "g*(K/groups) + k"}},
      {"  O[ -(a) + 2 , (b - c) - d ] += A[a] * B[b]", "O", {"A", "B"}, UpdateKind::kAccumulate, {"-a + 2", "b - c - d"}},
      {"O[a - (b - c), a*(b*c)] += A[a] * B[b]", "O", {"A", "B"}, UpdateKind::kAccumulate, {"a - (b - c)", "a*(b*c)"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    StatementDecl s = statement(c.text);
    EXPECT_EQ(s.output.tensor, c.output);
    EXPECT_EQ(s.update, c.update);
    ASSERT_EQ(s.inputs.size(), c.inputs.size());
    for (std::size_t i = 0; i < c.inputs.size(); ++i) EXPECT_EQ(s.inputs[i].tensor, c.inputs[i]);
    ASSERT_EQ(s.output.indices.size(), c.output_indices.size());
    for (std::size_t i = 0; i < c.output_indices.size(); ++i) EXPECT_EQ(to_string(s.output.indices[i]), c.output_indices[i]);
  }
}

struct ErrorCase {
  std::string text;
  std::string message;   // expected substring
  std::string location;  // expected "stmt:line:col"
};

TEST(Parser, StatementErrors) {
  const ErrorCase cases[] = {
      {"C[m, n] += A[m, @] * B[k, n]", "unexpected character '@'", "stmt:1:17"},
      {"C[m, n] A[m, k]", "expected '+=' or '=' after the output access, found 'A'", "stmt:1:9"},
      {"C[m, n += A[m, k]", "expected ']' to close the indices of 'C'", "stmt:1:8"},
      {"C[] += A[m]", "tensor 'C' is indexed with no index", "stmt:1:3"},
      {"C[m] += A[2m]", "malformed number '2m'", "stmt:1:11"},
      {"C[m] += A[B[m]]", "tensor access 'B[...]' inside an index", "stmt:1:11"},
      {"C[m] += A[m == 1]", "a comparison '==' is not allowed here", "stmt:1:13"},
      {"C[m] += A[m +]", "expected a name, an integer or '(', found ']'", "stmt:1:14"},
      {"C[m] += A[m] B[m]", "unexpected 'B' after the statement", "stmt:1:14"},
      {"C[m] += ", "expected an input access after '+=', found end of text", "stmt:1:9"},
      {"C[m] += A[(m]", "expected ')' to close '(', found ']'", "stmt:1:13"},
      {"[m] += A[m]", "expected the output access", "stmt:1:1"},
      {"C[m] += A[99999999999999999999]", "does not fit in 64 bits", "stmt:1:11"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    std::string err = user_error_of([&] { statement(c.text); });
    EXPECT_NE(err.find(c.message), std::string::npos) << err;
    EXPECT_EQ(err.rfind(c.location + ": error:", 0), 0u) << err;
    EXPECT_NE(err.find("^"), std::string::npos) << "no caret in: " << err;
  }
}

TEST(Parser, ErrorsPointIntoMultiLineText) {
  SourceText src("multi.txt", "C[m, n]\n  += A[m, k] $ B[k, n]");
  std::string err = user_error_of([&] { parse_statement(src.text(), locator_for(src)); });
  EXPECT_EQ(err.rfind("multi.txt:2:14: error: unexpected character '$'", 0), 0u) << err;
  EXPECT_NE(err.find("\n    += A[m, k] $ B[k, n]\n               ^"), std::string::npos) << err;
}

struct EvalCase {
  std::string text;
  std::int64_t expected;
};

// Untrusted bytes as printable text: valid UTF-8 kept, control characters and bytes of no valid
// sequence (overlong, surrogate, cut short, past U+10FFFF) escaped, long text cut at a character.
TEST(Diagnostic, PrintableTextOfUntrustedBytes) {
  EXPECT_EQ(printable("conv_1/relu"), "conv_1/relu");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80");
  EXPECT_EQ(printable("a\x1b[31mb\n\x7f"), "a\\x1B[31mb\\x0A\\x7F");
  EXPECT_EQ(printable("\xc2\x9b"), "\\xC2\\x9B");                  // C1 control (CSI)
  EXPECT_EQ(printable("\xc0\xaf"), "\\xC0\\xAF");                  // overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xE0\\x80\\xAF");       // overlong, 3 bytes
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xED\\xA0\\x80");       // surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable("x\xe4\xb8"), "x\\xE4\\xB8");                // cut short
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad", 7), "\xe4\xb8\xad\xe4\xb8\xad...");
  EXPECT_EQ(printable(std::string(300, 'w')).size(), 203u);
  EXPECT_EQ(printable("line 1\n\tline 2\r\x1b", 200, true), "line 1\n\tline 2\\x0D\\x1B");
}

TEST(Expr, EvaluateWithFloorSemantics) {
  const ParamValues params = {{"H", 28}, {"pad", 1}, {"R", 3}, {"stride", 2}, {"dil", 1}, {"neg", -7}};
  const EvalCase cases[] = {
      {"(H + 2*pad - dil*(R - 1) - 1)/stride + 1", 14},
      {"7/2", 3},
      {"neg/2", -4},  // floor, not truncation
      {"neg % 2", 1},
      {"7 % -2", -1},
      {"-H", -28},
      {"2*3 + 4*5 - 6", 20},
      {"H - pad - R", 24},  // left-associative
      {"H == 28", 1},
      {"H != 28", 0},
      {"R < stride", 0},
      {"R <= 3", 1},
      {"R > 2", 1},
      {"R >= 4", 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(evaluate(expr(c.text, true), params, "test"), c.expected);
  }
}

TEST(Expr, EvaluateErrors) {
  const ParamValues params = {{"M", 8}, {"Z", 0}, {"BIG", INT64_MAX}};
  const std::pair<std::string, std::string> cases[] = {
      {"M2 + 1", "unknown parameter 'M2' in the test; parameters are"},
      {"M / Z", "division by zero while evaluating the test"},
      {"M % Z", "division by zero"},
      {"BIG + 1", "integer overflow while evaluating the test"},
      {"BIG * 2", "integer overflow"},
      {"-BIG - 2", "integer overflow"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    // `&text = text`: Clang 14 cannot capture a structured binding (C++20 allows it).
    std::string err = user_error_of([&, &text = text] { evaluate(expr(text), params, "the test"); });
    EXPECT_NE(err.find(message.substr(0, message.find(';'))), std::string::npos) << err;
  }
  EXPECT_NE(user_error_of([&] { evaluate(expr("M2"), params, "x"); }).find("hint: parameters are: BIG, M, Z"),
            std::string::npos);
}

TEST(Expr, PrintingRoundTrips) {
  for (const std::string text : {"p*stride + r*dil - pad", "(H + 2*pad - dil*(R - 1) - 1)/stride + 1", "a - (b - c)",
                                 "-(a + b)", "a % b * c", "a*(b % c)", "g*(K/groups) + k"}) {
    std::string printed = to_string(expr(text));
    EXPECT_EQ(to_string(expr(printed)), printed) << text;
    // Printing keeps the value: evaluate both at one point.
    ParamValues v = {{"p", 3}, {"stride", 2}, {"r", 5}, {"dil", 3}, {"pad", 1}, {"H", 30}, {"R", 3}, {"a", 17},
                     {"b", 5}, {"c", 3}, {"g", 2}, {"K", 64}, {"groups", 4}, {"k", 7}};
    EXPECT_EQ(evaluate(expr(text), v, "t"), evaluate(expr(printed), v, "t")) << text << " vs " << printed;
  }
}

TEST(Affine, NormalisesAndAgreesWithEvaluationAtEveryPoint) {
  const ParamValues params = {{"stride", 2}, {"dil", 3}, {"pad", 1}, {"C", 8}, {"groups", 2}};
  const std::map<std::string, int> iters = {{"p", 0}, {"r", 1}, {"g", 2}};
  const std::pair<std::string, AffineExpr> cases[] = {
      {"p*stride + r*dil - pad", {-1, {{0, 2}, {1, 3}}}},
      {"g*(C/groups) + r", {0, {{1, 1}, {2, 4}}}},
      {"(p + 1)*2 - 2*p", {2, {}}},
      {"-(p - r)", {0, {{0, -1}, {1, 1}}}},
      {"stride*(p + pad)", {2, {{0, 2}}}},
      {"p", {0, {{0, 1}}}},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    AffineExpr a = to_affine(expr(text), params, iters, "test");
    EXPECT_EQ(a, expected) << to_string(a, {"p", "r", "g"});
    // Property: the affine form equals the expression at every point of a small box.
    for (int p = 0; p < 4; ++p)
      for (int r = 0; r < 4; ++r)
        for (int g = 0; g < 3; ++g) {
          ParamValues at = params;
          at["p"] = p;
          at["r"] = r;
          at["g"] = g;
          std::int64_t value = a.constant + a.coef(0) * p + a.coef(1) * r + a.coef(2) * g;
          EXPECT_EQ(value, evaluate(expr(text), at, "test"));
        }
  }
  EXPECT_EQ((AffineExpr{0, {{1, 1}}}).direct_iterator(), 1);
  EXPECT_EQ((AffineExpr{1, {{1, 1}}}).direct_iterator(), -1);
  EXPECT_EQ((AffineExpr{0, {{1, 2}}}).direct_iterator(), -1);
  EXPECT_EQ(to_string(AffineExpr{-1, {{0, 2}, {1, -1}}}, {"p", "r"}), "2*p - r - 1");
}

TEST(Affine, RejectsNonAffineIndices) {
  const ParamValues params = {{"S", 2}};
  const std::map<std::string, int> iters = {{"p", 0}, {"r", 1}};
  const std::pair<std::string, std::string> cases[] = {
      {"p*r", "non-affine index in index 0 of 'X': 'p*r' multiplies two expressions of iterators"},
      {"(p + 1)*(r + S)", "multiplies two expressions of iterators"},
      {"p/S", "'p/S' divides an expression of iterators"},
      {"S % p", "divides an expression of iterators"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    std::string err = user_error_of([&, &text = text] { to_affine(expr(text), params, iters, "index 0 of 'X'"); });
    EXPECT_NE(err.find(message), std::string::npos) << err;
    EXPECT_NE(err.find("hint:"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace tmap
