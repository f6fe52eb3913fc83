// The compute language: a statement, an epilogue, and an expression with comparisons (as in
// "requires").
#include "fuzz_util.h"
#include "tmap/frontend/parser.h"
#include "tmap/ir/expr.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  const SourceText src("fuzz.dsl", fuzz::text_of(data, size));
  const Locator at = locator_for(src);
  fuzz::expect_clean([&] { parse_statement(src.text(), at); });
  fuzz::expect_clean([&] { parse_epilogue(src.text(), at); });
  fuzz::expect_clean([&] {
    Expr e = parse_expression(src.text(), at, true);
    (void)to_string(e);
    (void)evaluate(e, {{"x", 3}, {"N", 1 << 20}}, "the fuzzed expression");  // overflow is a UserError
  });
  return 0;
}
