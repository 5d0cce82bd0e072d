#include "schema/json_text.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace mfsdp::schema {
namespace {

// ordered_json keeps an object's members in a vector of pairs with a const key, which it copies,
// values and all, whenever it grows: a value nested tens of thousands of levels deep (a
// checkpoint manifest's config, say) overflowed the stack while the document was read.
constexpr size_t kMaxOrderedDepth = 256;

// Builds the document like Json::parse, but keeps the byte offset of any error; Json::parse
// reports none for some (a number too large for a double). Stops at an array or object nested
// deeper than `max_depth`.
template <typename Json>
class LocatingParser {
 public:
  LocatingParser(Json& root, size_t max_depth)
      : dom_(root, /*allow_exceptions_=*/false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool value) { return dom_.boolean(value); }
  bool number_integer(typename Json::number_integer_t value) { return dom_.number_integer(value); }
  bool number_unsigned(typename Json::number_unsigned_t value) {
    return dom_.number_unsigned(value);
  }
  bool number_float(typename Json::number_float_t value, const std::string& text) {
    return dom_.number_float(value, text);
  }
  bool string(typename Json::string_t& value) { return dom_.string(value); }
  bool binary(typename Json::binary_t& value) { return dom_.binary(value); }
  bool start_object(std::size_t size) { return deeper() && dom_.start_object(size); }
  bool key(typename Json::string_t& value) { return dom_.key(value); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t size) { return deeper() && dom_.start_array(size); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& error) {
    error_position = position;
    error_message = error.what();
    return false;
  }

  std::size_t error_position = 0;
  std::string error_message;
  bool too_deep = false;

 private:
  bool deeper() {
    too_deep = ++depth_ > max_depth_;
    return !too_deep;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::size_t max_depth_;
  std::size_t depth_ = 0;
};

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error
// while parsing value - invalid literal; last read: 'tru'" without the prefix, position and
// echoed input (which can be megabytes of an unterminated string).
std::string json_error_phrase(std::string message) {
  if (message.rfind("[json.exception.", 0) == 0) {
    const size_t end = message.find("] ");
    if (end != std::string::npos) message.erase(0, end + 2);
  }
  if (message.rfind("parse error", 0) == 0) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) message.erase(0, colon + 2);
  }
  const size_t echo = message.find("; last read: ");
  if (echo != std::string::npos) message.erase(echo);
  if (message.size() > 160) {
    size_t end = 160;
    while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;
    message = message.substr(0, end) + "...";
  }
  std::replace(message.begin(), message.end(), '\n', ' ');
  return message;
}

// "line L column C" (1-based) of the byte at 0-based `offset`, or just past the end of the
// text for an offset at the end.
std::string text_location(const std::string& text, size_t offset) {
  const size_t index = std::min(offset, text.size());
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < index; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + " column " + std::to_string(column);
}

std::string byte_location(const std::string& text, size_t offset) {
  return "byte offset " + std::to_string(offset) + " (" + text_location(text, offset) + ")";
}

bool is_whitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t skip_whitespace(const std::string& text, size_t i) {
  while (i < text.size() && is_whitespace(text[i])) ++i;
  return i;
}

// The offset just past the first JSON value of `text`, which the parser has found complete.
size_t end_of_first_value(const std::string& text) {
  size_t depth = 0;
  size_t i = skip_whitespace(text, 0);
  while (i < text.size()) {
    const char c = text[i];
    if (c == '{' || c == '[') {
      ++depth;
      ++i;
      continue;
    }
    if (c == ',' || c == ':' || is_whitespace(c)) {
      ++i;
      continue;
    }
    if (c == '}' || c == ']') {
      --depth;
      ++i;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      ++i;
    } else if (c == 't' || c == 'n' || c == 'f') {
      i += c == 'f' ? 5 : 4;  // true, null, false
    } else {
      while (i < text.size() && std::strchr("0123456789+-.eE", text[i]) != nullptr) ++i;
    }
    if (depth == 0) return std::min(i, text.size());
  }
  return text.size();
}

// The offset of the first '[' or '{' nested deeper than `depth` in `text`, which the parser has
// read as valid JSON up to there.
size_t offset_of_depth(const std::string& text, size_t depth) {
  size_t open = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '[' || c == '{') {
      if (++open > depth) return i;
    } else if (c == ']' || c == '}') {
      --open;
    }
  }
  return text.size();
}

const char* kFix = "; a JSON file holds one document, so remove what follows it";

template <typename Json>
std::string parse_text(const std::string& text, Json& out, size_t max_depth) {
  LocatingParser<Json> parser(out, max_depth);
  const size_t nul = text.find('\0');
  if (!Json::sax_parse(text, &parser)) {
    if (parser.too_deep) {
      return "arrays and objects nested deeper than " + std::to_string(max_depth) + " levels (" +
             text_location(text, offset_of_depth(text, max_depth)) + ")";
    }
    // nlohmann's positions count bytes read, from 1.
    const size_t offset = parser.error_position == 0 ? 0 : parser.error_position - 1;
    if (nul != std::string::npos && nul <= offset) {
      return "a NUL byte at " + byte_location(text, nul) + "; JSON text cannot hold one";
    }
    const std::string phrase = json_error_phrase(parser.error_message);
    const std::string end_of_input = "expected end of input";
    if (parser.error_message.size() >= end_of_input.size() &&
        parser.error_message.compare(parser.error_message.size() - end_of_input.size(),
                                     end_of_input.size(), end_of_input) == 0) {
      const size_t trailing = skip_whitespace(text, end_of_first_value(text));
      return "trailing content after the JSON document at " + byte_location(text, trailing) + kFix;
    }
    return phrase + " (" + text_location(text, offset) + ")";
  }
  // The parser stopped at the NUL as if the input ended there, after a complete document.
  if (nul != std::string::npos) {
    return "trailing content after the JSON document: a NUL byte at " + byte_location(text, nul) +
           kFix;
  }
  return "";
}

}  // namespace

std::string parse_json_text(const std::string& text, nlohmann::json& out) {
  return parse_text(text, out, std::numeric_limits<size_t>::max());
}

std::string parse_json_text(const std::string& text, nlohmann::ordered_json& out) {
  return parse_text(text, out, kMaxOrderedDepth);
}

}  // namespace mfsdp::schema
