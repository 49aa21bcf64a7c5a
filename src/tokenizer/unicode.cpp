// UTF-8 validation/repair, utf8proc normalization and the GPT-2 byte-level table.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace echo::tokenizer {
namespace {

// Length of the well-formed sequence starting at text[i] (Unicode Table 3-7), or 0 when it is
// ill-formed; `maximal` gets the length of the maximal subpart to replace by one U+FFFD.
std::size_t sequence_length(std::string_view text, std::size_t i, std::size_t& maximal) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = at(i);
  maximal = 1;
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < need; ++k) {
    if (i + k >= text.size()) return 0;
    const unsigned char b = at(i + k);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
    maximal = k + 1;
  }
  return need;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

bool is_valid_utf8(std::string_view text) {
  std::size_t i = 0, maximal = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = sequence_length(text, i, maximal);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::size_t count_ill_formed_utf8(std::string_view text) {
  std::size_t count = 0, i = 0, maximal = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = sequence_length(text, i, maximal);
    count += n == 0;
    i += n == 0 ? maximal : n;
  }
  return count;
}

std::string repair_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  std::size_t i = 0, maximal = 0;
  while (i < text.size()) {
    const std::size_t n = sequence_length(text, i, maximal);
    if (n == 0) {
      append_utf8(out, U'\uFFFD');
      i += maximal;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool normalize(std::string_view text, NormalForm form, std::string& out) {
  bool ascii = true;
  for (const char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return false;  // every normal form leaves ASCII alone
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* raw = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &raw, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(raw);
  ECHO_CHECK(n >= 0, "Unicode normalization failed: {}", utf8proc_errmsg(n));
  out.assign(reinterpret_cast<const char*>(raw), static_cast<std::size_t>(n));
  return true;
}

int codepoint_to_byte(char32_t codepoint) {
  static constexpr auto kInverse = [] {
    std::array<int16_t, kMaxByteCodepoint + 1> inverse{};
    for (auto& v : inverse) v = -1;
    for (int b = 0; b < 256; ++b) inverse[kByteToCodepoint[b]] = static_cast<int16_t>(b);
    return inverse;
  }();
  return codepoint <= kMaxByteCodepoint ? kInverse[codepoint] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(out, kByteToCodepoint[static_cast<unsigned char>(c)]);
  return out;
}

}  // namespace echo::tokenizer
