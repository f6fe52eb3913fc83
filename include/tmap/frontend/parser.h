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
#include <string>
#include <string_view>
#include <vector>

#include "tmap/ir/compute.h"
#include "tmap/ir/expr.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

/// The longest name accepted anywhere in an input: iterators, tensors, parameters, computes and
/// workloads.
inline constexpr std::size_t kMaxNameLength = 256;

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

/// Parses a statement such as "Out[n, k, p, q] += I[n, c, p*stride + r, q + s] * W[k, c, r, s]".
StatementDecl parse_statement(std::string_view text, const Locator& locate);

/// Parses one integer expression; comparisons only when allowed (requirements).
Expr parse_expression(std::string_view text, const Locator& locate, bool allow_comparison = false);

}  // namespace tmap
