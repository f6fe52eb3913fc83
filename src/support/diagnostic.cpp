#include "tmap/support/diagnostic.h"

#include <cstdio>
#include <filesystem>

#include <algorithm>

namespace tmap {

std::string SourceLoc::str() const {
  if (!known()) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

SourceText::SourceText(std::string file, std::string text)
    : file_(std::move(file)), text_(std::move(text)) {}

SourceLoc SourceText::at(std::size_t offset, std::size_t length) const {
  offset = std::min(offset, text_.size());
  SourceLoc loc;
  loc.file = file_;
  std::size_t line_start = 0;
  int line = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text_[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  std::size_t line_end = text_.find('\n', line_start);
  if (line_end == std::string::npos) line_end = text_.size();
  loc.line = line;
  loc.column = static_cast<int>(offset - line_start) + 1;
  loc.line_text = text_.substr(line_start, line_end - line_start);
  std::size_t max_len = line_end > offset ? line_end - offset : 1;
  loc.length = static_cast<int>(std::max<std::size_t>(1, std::min(length, max_len)));
  return loc;
}

std::string format_diagnostic(const SourceLoc& loc, std::string_view message,
                              std::string_view hint) {
  // Long lines (a minified JSON file) are shown as a window around the column.
  constexpr std::size_t kMaxShown = 120, kBefore = 50, kMaxMessage = 4000;
  std::string out;
  if (!loc.file.empty()) out += loc.str() + ": ";
  out += "error: ";
  if (message.size() > kMaxMessage) out += std::string(message.substr(0, kMaxMessage)) + "...";
  else out += message;
  if (loc.known() && !loc.line_text.empty()) {
    std::size_t column = static_cast<std::size_t>(std::max(loc.column, 1)) - 1;
    std::size_t begin = 0, end = loc.line_text.size();
    if (end > kMaxShown) {
      begin = column > kBefore ? std::min(column - kBefore, end - kMaxShown) : 0;
      end = begin + kMaxShown;
    }
    std::string prefix = begin > 0 ? "..." : "";
    std::string shown = prefix + loc.line_text.substr(begin, end - begin) + (end < loc.line_text.size() ? "..." : "");
    out += "\n  " + shown + "\n  ";
    // Keep tabs so that the caret lines up with the text above it.
    std::size_t caret = prefix.size() + (column >= begin ? column - begin : 0);
    for (std::size_t i = 0; i < caret && i < shown.size(); ++i) out += shown[i] == '\t' ? '\t' : ' ';
    out += '^';
    std::size_t tildes = std::min<std::size_t>(loc.length > 1 ? loc.length - 1 : 0,
                                               end > column + 1 ? end - column - 1 : 0);
    out += std::string(tildes, '~');
  }
  if (!hint.empty()) {
    out += "\n  hint: ";
    out += hint;
  }
  return out;
}

namespace {

/// The length of the valid UTF-8 sequence at text[i] (0: none starts there), and its code point.
std::size_t utf8_sequence(std::string_view text, std::size_t i, char32_t& code) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    code = lead;
    return 1;
  }
  const std::size_t n = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  code = lead & (0x7f >> n);
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  const bool overlong = (n == 3 && code < 0x800) || (n == 4 && code < 0x10000);
  const bool surrogate = code >= 0xd800 && code <= 0xdfff;
  return overlong || surrogate || code > 0x10ffff ? 0 : n;
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes, bool keep_lines) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    char32_t code = 0;
    std::size_t n = utf8_sequence(text, i, code);
    const bool line = keep_lines && (code == '\n' || code == '\t');
    const bool control = n > 0 && !line && (code < 0x20 || (code >= 0x7f && code <= 0x9f));
    std::string piece;
    if (n > 0 && !control) {
      piece = text.substr(i, n);
    } else {
      n = std::max<std::size_t>(n, 1);
      for (std::size_t k = i; k < i + n; ++k) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned char>(text[k]));
        piece += hex;
      }
    }
    if (out.size() + piece.size() > max_bytes) return out + "...";
    out += piece;
    i += n;
  }
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

void throw_user_error(const SourceLoc& loc, std::string_view message, std::string_view hint) {
  throw UserError(format_diagnostic(loc, message, hint));
}

std::string diagnostic_message(const std::string& diagnostic) {
  std::string msg = diagnostic.substr(0, diagnostic.find('\n'));
  if (const std::size_t at = msg.find("error: "); at != std::string::npos) msg = msg.substr(at + 7);
  return msg;
}

std::string exception_text(const std::exception& e) {
  if (const auto* fs = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    std::string out = fs->code().message();
    if (!fs->path1().empty()) out += ": '" + fs->path1().string() + "'";
    if (!fs->path2().empty()) out += " and '" + fs->path2().string() + "'";
    return out;
  }
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0)
    if (const std::size_t end = what.find("] "); end != std::string::npos) return what.substr(end + 2);
  return what;
}

void internal_check_failed(const char* condition, const char* file, int line,
                           const std::string& message) {
  throw InternalError(std::string("internal error (a bug in tmap): ") + message + " [" +
                      condition + " at " + file + ":" + std::to_string(line) + "]");
}

}  // namespace tmap
