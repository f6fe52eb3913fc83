// An independent check of what build_compute proves about index bounds, for the tests and fuzz
// targets that feed it altered log records. An affine index takes its extreme values at corners
// of the iteration space (each iterator at 0 or extent - 1), so evaluating every corner, term by
// term with overflow checks, bounds every index and offset a kernel computes, without the
// interval arithmetic under test.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "tmap/ir/compute.h"

namespace tmap::testing {

/// Why `c` would index out of bounds or beyond 32 bits somewhere; empty when it never does. At
/// every corner: each output index lies in its dimension, and each access's offset (with the
/// partial sums of every index) fits in a 32-bit int. Gives up (empty) past 2^16 corners.
inline std::string corner_fault(const Compute& c) {
  const std::size_t n = c.iters.size();
  if (n > 16) return {};
  const std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
  for (std::uint64_t corner = 0; corner < (std::uint64_t{1} << n); ++corner) {
    auto value = [&](int it) -> std::int64_t { return (corner >> it) & 1 ? c.iters[it].extent - 1 : 0; };
    for (std::size_t ai = 0; ai <= c.inputs.size(); ++ai) {
      const Access& a = ai == 0 ? c.output : c.inputs[ai - 1];
      const Tensor& t = c.tensor_of(a);
      std::int64_t offset = 0;
      for (std::size_t d = 0; d < a.indices.size(); ++d) {
        std::int64_t index = a.indices[d].constant;
        for (const auto& [it, coef] : a.indices[d].terms) {
          std::int64_t term = 0;
          if (__builtin_mul_overflow(coef, value(it), &term) || __builtin_add_overflow(index, term, &index) ||
              index > int32_max || index < -int32_max)
            return "index " + std::to_string(d) + " of '" + t.name + "' leaves 32 bits at corner " + std::to_string(corner);
        }
        if (ai == 0 && (index < 0 || index >= t.shape[d]))
          return "output index " + std::to_string(d) + " is " + std::to_string(index) + " at corner " +
                 std::to_string(corner) + ", outside [0, " + std::to_string(t.shape[d]) + ")";
        std::int64_t part = 0;
        if (__builtin_mul_overflow(index, t.stride(d), &part) || __builtin_add_overflow(offset, part, &offset) ||
            offset > int32_max || offset < -int32_max)
          return "the offset into '" + t.name + "' leaves 32 bits at corner " + std::to_string(corner);
      }
    }
  }
  return {};
}

}  // namespace tmap::testing
