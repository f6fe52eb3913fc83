#include "tmap/frontend/json_locations.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <algorithm>
#include <vector>

#include "tmap/support/files.h"
#include "tmap/support/json_integer.h"

namespace tmap {

class JsonScanner {
 public:
  JsonScanner(std::string_view text, JsonLocations& out) : s_(text), out_(out) {}

  void scan() {
    skip_ws();
    value("");
  }

 private:
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }

  // Returns the decoded string; i_ ends after the closing quote.
  std::string string_token() {
    std::string out;
    ++i_;  // opening quote
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
        char e = s_[i_ + 1];
        if (e == 'u') {
          out += s_.substr(i_, 6);  // kept as written: tmap's schemas use no such keys
          i_ += 6;
          continue;
        }
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        i_ += 2;
        continue;
      }
      out += s_[i_++];
    }
    ++i_;  // closing quote
    return out;
  }

  void value(const std::string& ptr) {
    skip_ws();
    std::size_t begin = i_;
    if (i_ >= s_.size()) return;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      skip_ws();
      while (i_ < s_.size() && s_[i_] != '}') {
        std::size_t key_begin = i_;
        std::string key = string_token();
        std::string child = JsonLocations::child(ptr, key);
        const JsonLocations::Span span{key_begin, i_ - key_begin};
        if (!out_.keys_.try_emplace(child, span).second && !out_.duplicate_)
          out_.duplicate_ = std::make_pair(key, span);
        skip_ws();
        ++i_;  // ':'
        value(child);
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ',') ++i_;
        skip_ws();
      }
      ++i_;
    } else if (c == '[') {
      ++i_;
      skip_ws();
      int index = 0;
      while (i_ < s_.size() && s_[i_] != ']') {
        value(JsonLocations::child(ptr, std::to_string(index++)));
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ',') ++i_;
        skip_ws();
      }
      ++i_;
    } else if (c == '"') {
      string_token();
    } else {
      while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' &&
             !std::isspace(static_cast<unsigned char>(s_[i_])))
        ++i_;
    }
    out_.values_[ptr] = {begin, i_ > begin ? i_ - begin : 1};
  }

  std::string_view s_;
  std::size_t i_ = 0;
  JsonLocations& out_;
};

JsonLocations::JsonLocations(const SourceText& source) : source_(source) {
  JsonScanner(source.text(), *this).scan();
}

std::string JsonLocations::child(const std::string& pointer, std::string_view token) {
  std::string out = pointer + "/";
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::optional<JsonLocations::DuplicateKey> JsonLocations::duplicate_key() const {
  if (!duplicate_) return std::nullopt;
  return DuplicateKey{duplicate_->first, source_.at(duplicate_->second.begin, duplicate_->second.length)};
}

SourceLoc JsonLocations::value(const std::string& pointer) const {
  auto it = values_.find(pointer);
  if (it == values_.end()) return SourceLoc::whole(source_.file());
  return source_.at(it->second.begin, it->second.length);
}

SourceLoc JsonLocations::key(const std::string& pointer) const {
  auto it = keys_.find(pointer);
  if (it == keys_.end()) return value(pointer);
  return source_.at(it->second.begin, it->second.length);
}

Locator JsonLocations::string_locator(const std::string& pointer) const {
  auto it = values_.find(pointer);
  if (it == values_.end() || source_.text()[it->second.begin] != '"') {
    SourceLoc whole = value(pointer);
    return [whole](std::size_t, std::size_t) { return whole; };
  }
  // raw[k] = file offset of the k-th decoded character (plus one past the end).
  std::vector<std::size_t> raw;
  const std::string& s = source_.text();
  std::size_t i = it->second.begin + 1;
  while (i < s.size() && s[i] != '"') {
    raw.push_back(i);
    if (s[i] == '\\') i += (i + 1 < s.size() && s[i + 1] == 'u') ? 6 : 2;
    else ++i;
  }
  raw.push_back(i);
  const SourceText* src = &source_;
  return [raw, src](std::size_t offset, std::size_t length) {
    std::size_t b = raw[std::min(offset, raw.size() - 1)];
    std::size_t e = raw[std::min(offset + length, raw.size() - 1)];
    return src->at(b, e > b ? e - b : 1);
  };
}

SourceText read_source_file(const std::string& path, const std::string& what, const std::string& hint) {
  std::error_code ec;
  auto fail = [&](const std::string& msg, const std::string& why_hint) {
    throw UserError(format_diagnostic(SourceLoc::whole(path), msg, why_hint));
  };
  if (std::filesystem::is_directory(path, ec))
    fail("'" + path + "' is a directory, not a " + what, "name a file; " + hint);
  if (!std::filesystem::exists(path, ec)) fail(what + " '" + path + "' does not exist", hint);
  std::string text, why;
  if (!read_bounded(path, kMaxSourceFileBytes, text, why))
    fail("cannot read " + what + " '" + path + "': " + why, "name the right file; " + what + "s are small JSON documents");
  return SourceText(path, text);
}

std::size_t json_nesting_violation(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

nlohmann::ordered_json parse_json_text(const SourceText& source, const std::string& hint) {
  if (source.text().find_first_not_of(" \t\r\n") == std::string::npos)
    throw_user_error(SourceLoc::whole(source.file()), "'" + source.file() + "' is empty", hint);
  // nlohmann parses any depth, but everything that walks a document afterwards recurses: bound it.
  if (std::size_t at = json_nesting_violation(source.text(), kMaxJsonDepth); at != std::string_view::npos)
    throw_user_error(source.at(at), "JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep", hint);
  try {
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(source.text());
    // Readers differ on which copy of a repeated key counts (nlohmann keeps the last): refuse it.
    if (const auto dup = JsonLocations(source).duplicate_key())
      throw_user_error(dup->loc, "key \"" + dup->key + "\" appears twice in one object", "give each key once");
    return doc;
  } catch (const nlohmann::json::parse_error& e) {
    std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    std::string msg = e.what();
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 3, column 5: ...".
    if (auto p = msg.find("column"); p != std::string::npos)
      if (auto q = msg.find(": ", p); q != std::string::npos) msg = msg.substr(q + 2);
    throw_user_error(source.at(at), "invalid JSON: " + msg, hint);
  } catch (const nlohmann::json::exception& e) {
    // A number beyond a double ("1e999") is out_of_range, without a position: find its text.
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    std::size_t at = 0;
    if (auto q = msg.find('\''); q != std::string::npos)
      if (auto r = msg.find('\'', q + 1); r != std::string::npos)
        if (auto found = source.text().find(msg.substr(q + 1, r - q - 1)); found != std::string::npos) at = found;
    throw_user_error(source.at(at), "invalid JSON: " + msg, hint);
  }
}

void JsonReader::fail_value(const std::string& ptr, const std::string& msg, const std::string& hint) const {
  throw_user_error(locs_.value(ptr), msg, hint);
}

void JsonReader::fail_key(const std::string& ptr, const std::string& msg, const std::string& hint) const {
  throw_user_error(locs_.key(ptr), msg, hint);
}

void JsonReader::expect_type(const nlohmann::ordered_json& v, const std::string& ptr, bool ok,
                             const std::string& what, const std::string& expected) const {
  if (!ok) fail_value(ptr, what + " must be " + expected + ", not " + v.type_name());
}

void JsonReader::check_keys(const nlohmann::ordered_json& obj, const std::string& ptr,
                            const std::vector<std::string>& allowed, const std::string& what) const {
  for (const auto& [key, v] : obj.items())
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      fail_key(JsonLocations::child(ptr, key), "unknown key \"" + key + "\" in " + what,
               "allowed keys are: " + join(allowed));
}

void JsonReader::require_key(const nlohmann::ordered_json& obj, const std::string& ptr, const std::string& key,
                             const std::string& what, const std::string& hint) const {
  if (!obj.contains(key)) fail_value(ptr, what + " has no \"" + key + "\"", hint);
}

Expr JsonReader::expression(const nlohmann::ordered_json& v, const std::string& ptr, const std::string& what,
                            bool allow_comparison) const {
  if (is_integer_of<std::int64_t>(v)) return ExprNode::make_int(v.get<std::int64_t>(), locs_.value(ptr));
  if (v.is_number_integer()) fail_value(ptr, what + " is beyond 64-bit integers");
  if (v.is_string()) return parse_expression(v.get_ref<const std::string&>(), locs_.string_locator(ptr), allow_comparison);
  fail_value(ptr, what + " must be an integer or a string with an expression, not " + std::string(v.type_name()));
}

}  // namespace tmap
