// Shared by the fuzz targets: the shipped abstractions, and the one rule of every target — bad
// input may end in a UserError (a clear message), never in a crash, a hang, an InternalError or
// any other exception, which libFuzzer reports as a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tmap/hw/hw_abstraction.h"
#include "tmap/support/diagnostic.h"

namespace tmap::fuzz {

inline const std::vector<HwAbstraction>& shipped_hw() {
  static const std::vector<HwAbstraction> all = load_hw_directory(TMAP_SOURCE_HW_DIR);
  return all;
}

inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// Runs f; a UserError is the expected way for bad input to end.
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const UserError&) {
  }
}

}  // namespace tmap::fuzz
