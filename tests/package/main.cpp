// Maps GEMM through the installed library and prints the number of matches.
#include <iostream>

#include "tmap/frontend/op_library.h"
#include "tmap/match/match_report.h"

int main() {
  tmap::Compute c = tmap::build_compute(tmap::builtin_op("gemm"));
  tmap::MatchReport r = tmap::match_compute(c, tmap::load_hw_abstractions(), tmap::Enumeration::kAmos);
  std::cout << "matches " << r.matches.size() << "\n";
  // fp16 -> fp32: WMMA 3 shapes x 4 layouts, mma.sync and wgmma 1 shape x 4 layouts each in both
  // operand orders, SIMT 1 shape x 4 layouts.
  return r.matches.size() == 32 ? 0 : 1;
}
