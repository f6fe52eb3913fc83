// Source positions of the values in a JSON text, so that errors found after parsing (a bad
// expression inside a string, a wrong type) can point at the file, line and column.
// nlohmann::json keeps no positions; this index is built by one scan of the same text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tmap/frontend/parser.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

class JsonLocations {
 public:
  /// Indexes `source`, which must hold syntactically valid JSON (parse it first).
  explicit JsonLocations(const SourceText& source);

  /// Location of the value at a JSON pointer ("/tensors/I/shape/0"); the whole file when the
  /// pointer is unknown.
  SourceLoc value(const std::string& pointer) const;
  /// Location of the key of the member at `pointer` (its value for array elements).
  SourceLoc key(const std::string& pointer) const;
  /// A Locator for the text of the string value at `pointer`, mapping offsets in the decoded
  /// string back to the file (escape sequences included).
  Locator string_locator(const std::string& pointer) const;

  /// The first key that its object already holds (compared as written, escapes undecoded).
  struct DuplicateKey {
    std::string key;
    SourceLoc loc;
  };
  std::optional<DuplicateKey> duplicate_key() const;

  /// Appends one reference token to a pointer, escaping '~' and '/'.
  static std::string child(const std::string& pointer, std::string_view token);

 private:
  struct Span {
    std::size_t begin = 0;
    std::size_t length = 1;
  };
  const SourceText& source_;
  std::map<std::string, Span> values_;
  std::map<std::string, Span> keys_;
  std::optional<std::pair<std::string, Span>> duplicate_;
  friend class JsonScanner;
};

/// Inputs are bounded: deeper documents and larger files are refused with a clear error.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr std::uintmax_t kMaxSourceFileBytes = std::uintmax_t{64} << 20;

/// Reads a whole file; a UserError naming the file (`what`, e.g. "compute file") and `hint`
/// when it is missing, a directory, too large or unreadable.
SourceText read_source_file(const std::string& path, const std::string& what, const std::string& hint);

/// The offset of the first '[' or '{' nested deeper than `max_depth` (outside strings), or npos.
std::size_t json_nesting_violation(std::string_view text, int max_depth);

/// Parses JSON (keeping member order); a syntax error, or nesting deeper than kMaxJsonDepth, is
/// a UserError at its line and column.
nlohmann::ordered_json parse_json_text(const SourceText& source, const std::string& hint);

/// Checks the members of a parsed JSON document, with errors that point into its file.
class JsonReader {
 public:
  explicit JsonReader(const JsonLocations& locs) : locs_(locs) {}

  [[noreturn]] void fail_value(const std::string& ptr, const std::string& msg, const std::string& hint = {}) const;
  [[noreturn]] void fail_key(const std::string& ptr, const std::string& msg, const std::string& hint = {}) const;
  /// Fails at `ptr` with "<what> must be <expected>, not <type>" unless `ok`.
  void expect_type(const nlohmann::ordered_json& v, const std::string& ptr, bool ok, const std::string& what,
                   const std::string& expected) const;
  /// Fails at the first member of `obj` whose key is not in `allowed`.
  void check_keys(const nlohmann::ordered_json& obj, const std::string& ptr,
                  const std::vector<std::string>& allowed, const std::string& what) const;
  /// Fails at `ptr` (the object) unless it has member `key`.
  void require_key(const nlohmann::ordered_json& obj, const std::string& ptr, const std::string& key,
                   const std::string& what, const std::string& hint = {}) const;
  /// An integer, or a string holding an expression over parameters.
  Expr expression(const nlohmann::ordered_json& v, const std::string& ptr, const std::string& what,
                  bool allow_comparison = false) const;

  SourceLoc value_loc(const std::string& ptr) const { return locs_.value(ptr); }
  SourceLoc key_loc(const std::string& ptr) const { return locs_.key(ptr); }
  Locator string_locator(const std::string& ptr) const { return locs_.string_locator(ptr); }

 private:
  const JsonLocations& locs_;
};

}  // namespace tmap
