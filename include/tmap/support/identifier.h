// Names from files that reach generated source must be C identifiers.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>

namespace tmap {

/// Whether `s` is a C identifier: a letter or '_' first, then letters, digits and '_'.
inline bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace tmap
