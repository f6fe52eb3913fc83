// Integers read from JSON. nlohmann's get<T>() converts a float or a wider integer to T without a
// check (undefined behaviour for a float out of T's range), so readers of untrusted files ask first.
#pragma once

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace tmap {

/// Whether `v` (a nlohmann::json or ordered_json) is a JSON integer that T holds.
template <typename T, typename Json>
bool is_integer_of(const Json& v) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.template get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  const std::int64_t x = v.template get<std::int64_t>();
  return x >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
         x <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
}

}  // namespace tmap
