// Diagnostics: the three failure channels of tmap, kept apart.
//
//  - UserError: the user's input is wrong. The message names the input (file, line, column and
//    the offending text) and says how to fix it. The CLI exits with code 2.
//  - "no match" / "infeasible": not an error at all, returned as data with a reason by the
//    matcher (see tmap/match/).
//  - TMAP_CHECK: an internal invariant; a failure is a bug in tmap (InternalError, exit code 1).
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tmap {

/// A range of source text, for pointing at the offending part of a user's input.
struct SourceLoc {
  std::string file;       ///< Path or pseudo-name such as "<op:conv2d>" or "<--set>".
  int line = 0;           ///< 1-based; 0 when the location is unknown.
  int column = 0;         ///< 1-based, in bytes.
  int length = 1;         ///< Bytes to underline.
  std::string line_text;  ///< The whole source line, for the caret display.

  /// A location that names only a file (or input) with no position in it.
  static SourceLoc whole(std::string file) {
    SourceLoc loc;
    loc.file = std::move(file);
    return loc;
  }
  bool known() const { return line > 0; }
  /// "file:line:col" (or just "file" when the position is unknown).
  std::string str() const;
};

/// A text that locations point into: a file's whole contents and its name.
class SourceText {
 public:
  SourceText(std::string file, std::string text);
  const std::string& file() const { return file_; }
  const std::string& text() const { return text_; }
  /// The location of `length` bytes starting at byte `offset` of the text.
  SourceLoc at(std::size_t offset, std::size_t length = 1) const;

 private:
  std::string file_;
  std::string text_;
};

/// The user's input is wrong; what() is a complete, formatted message.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

/// An internal invariant failed: a bug in tmap, not in the input.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

/// Formats a clang-style diagnostic: "file:line:col: error: message", the source line with a
/// caret under the offending text, and a "hint:" line when a fix is known.
std::string format_diagnostic(const SourceLoc& loc, std::string_view message,
                              std::string_view hint = {});

/// What an exception says, as a person reads it: a filesystem error as "<the system's reason>:
/// '<path>'", a JSON library error without its "[json.exception...]" tag; others as they are.
std::string exception_text(const std::exception& e);

/// The message of a diagnostic without its location, caret and hint: "unknown tensor 'X'" of
/// "file:1:2: error: unknown tensor 'X'\n...", for a message that quotes another.
std::string diagnostic_message(const std::string& diagnostic);

/// Untrusted text (a name from a model file, say) as it may be printed and written to JSON: valid
/// UTF-8 without control characters. A byte that starts no valid UTF-8 sequence, and each byte of
/// a control character (C0, DEL, C1), becomes "\xNN"; text longer than `max_bytes` is cut at a
/// character and ends in "...". `keep_lines` keeps newlines and tabs (a compiler's log).
std::string printable(std::string_view text, std::size_t max_bytes = 200, bool keep_lines = false);

/// "a, b, c": the items of a list in a message.
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

[[noreturn]] void throw_user_error(const SourceLoc& loc, std::string_view message,
                                   std::string_view hint = {});

[[noreturn]] void internal_check_failed(const char* condition, const char* file, int line,
                                        const std::string& message);

}  // namespace tmap

/// Always-on check of an internal invariant (not for user input).
#define TMAP_CHECK(cond, msg)                                              \
  do {                                                                     \
    if (!(cond)) ::tmap::internal_check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
