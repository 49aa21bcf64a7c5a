// Guards for JSON from untrusted files (safetensors headers, tokenizer.json): a nesting-depth
// bound checked on the raw bytes before a DOM is built, and a bounded excerpt of a value for
// error messages. Why: nlohmann's parser is iterative, but copying a value and dump() recurse
// once per nesting level, so a file nested 100,000 deep overflows the stack (SIGSEGV) the first
// time the DOM is copied or printed; and a whole value dumped into a message can be megabytes.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/text_file.h"

namespace echo {

// serde_json's default recursion limit: any file the Rust tokenizers / safetensors libraries
// load nests no deeper, and recursion this deep is harmless.
inline constexpr int kMaxJsonDepth = 128;

// The byte offset of the first '[' or '{' that opens nesting level limit + 1 (strings and their
// escapes skipped), or npos when the text never nests deeper than `limit`. A cheap scan; text
// that is not valid JSON is left for the parser to reject.
inline std::size_t json_depth_excess(std::string_view text, int limit = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
  return std::string_view::npos;
}

// `value` as compact JSON, cut to about `max_chars` characters ("..." marks a cut): safe for a
// value of any size (its depth already bounded by json_depth_excess).
template <class Json>
std::string json_excerpt(const Json& value, std::size_t max_chars = 80) {
  std::string out;
  if (value.is_array() || value.is_object()) {
    // Element by element, so a huge array is never printed whole.
    const bool array = value.is_array();
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (out.size() > max_chars) {
        out += ", ...";
        break;
      }
      if (!first) out += ", ";
      first = false;
      if (!array) out += nlohmann::json(it.key()).dump() + ": ";
      out += json_excerpt(*it, max_chars > out.size() ? max_chars - out.size() : 8);
    }
    out += array ? ']' : '}';
    return out;
  }
  out = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

// nlohmann's parse message for a person: without its "[json.exception.parse_error.101] " tag, and
// with every byte outside printable ASCII as \xNN (its "last read" excerpt quotes the damaged
// bytes; it writes control characters as <U+001B> itself, but invalid UTF-8 raw).
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string_view text = e.what();
  if (text.rfind("[json.exception.", 0) == 0)
    if (const std::size_t tag_end = text.find("] "); tag_end != std::string_view::npos) text.remove_prefix(tag_end + 2);
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F)
      out += c;
    else
      out += fmt::format("\\x{:02x}", byte);
  }
  return out;
}

// Parses JSON read from a file, `what` naming it in errors ("trainer state 'x'"): text nested
// deeper than kMaxJsonDepth or not valid JSON is an InputError, never a stack overflow.
inline nlohmann::json parse_untrusted_json(std::string_view text, const std::string& what) {
  const std::size_t too_deep = json_depth_excess(text);
  ECHO_INPUT_CHECK(too_deep == std::string_view::npos, "{} nests arrays/objects more than {} deep (at byte {})", what,
                   kMaxJsonDepth, too_deep);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ECHO_INPUT_FAIL("{} is not valid JSON: {}", what, json_error_text(e));
  }
}

// parse_untrusted_json of a whole file: "cannot read <what>: ..." when it cannot be read.
inline nlohmann::json read_untrusted_json_file(const std::string& path, const std::string& what) {
  return parse_untrusted_json(read_text_file(path, what), what);
}

}  // namespace echo
