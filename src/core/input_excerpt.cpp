// See input_excerpt.h. utf8proc decides what is a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are not).
#include "core/input_excerpt.h"

#include <fmt/format.h>
#include <utf8proc.h>

namespace echo {
namespace {

void append_printable(std::string& out, std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7F) {
      out += text[i++];
      continue;
    }
    if (byte == '\t' || byte == '\n' || byte == '\r') {
      out += byte == '\t' ? "\\t" : byte == '\n' ? "\\n" : "\\r";
      ++i;
      continue;
    }
    utf8proc_int32_t codepoint = -1;
    const utf8proc_ssize_t length =
        byte < 0x80 ? -1
                    : utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                       static_cast<utf8proc_ssize_t>(text.size() - i), &codepoint);
    if (length <= 0) {  // a control byte, DEL, or one byte of an ill-formed sequence
      out += fmt::format("\\x{:02x}", byte);
      ++i;
    } else if (codepoint >= 0x80 && codepoint <= 0x9F) {
      out += fmt::format("\\u{:04x}", codepoint);
      i += static_cast<std::size_t>(length);
    } else {
      out.append(text.substr(i, static_cast<std::size_t>(length)));
      i += static_cast<std::size_t>(length);
    }
  }
}

}  // namespace

std::string input_excerpt(std::string_view text, std::size_t limit) {
  std::string out;
  if (text.size() <= limit) {
    append_printable(out, text);
    return out;
  }
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  append_printable(out, text.substr(0, cut));
  out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace echo
