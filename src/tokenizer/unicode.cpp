// UTF-8 validation/repair, utf8proc normalization and the GPT-2 byte-level table.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace echo::tokenizer {
namespace {

// The longest full decomposition of one code point is 18 (U+FDFA under NFKD).
constexpr utf8proc_ssize_t kMaxDecomposition = 32;

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
  // NOTE: what utf8proc_map does (decompose, order the combining marks, compose, encode), except
  // the ordering: utf8proc's is a bubble sort, quadratic in a run of marks (a 2 MB run, one
  // hostile document, took about an hour); a stable sort by combining class gives the same order.
  const auto opts = static_cast<utf8proc_option_t>(options);
  std::vector<utf8proc_int32_t> points;
  points.reserve(text.size() + 16);
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  utf8proc_int32_t decomposed[kMaxDecomposition];
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t used = utf8proc_iterate(p, left, &c);
    ECHO_CHECK(used > 0, "Unicode normalization failed: {}", utf8proc_errmsg(used));
    int boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(c, decomposed, kMaxDecomposition, opts, &boundclass);
    ECHO_CHECK(n >= 0 && n <= kMaxDecomposition, "Unicode normalization of U+{:04X} failed: {}", c,
               n < 0 ? utf8proc_errmsg(n) : "a decomposition longer than expected");
    points.insert(points.end(), decomposed, decomposed + n);
    p += used;
    left -= used;
  }
  const auto combining_class = [](utf8proc_int32_t c) { return utf8proc_get_property(c)->combining_class; };
  for (size_t i = 0; i < points.size();) {
    size_t end = i;
    while (end < points.size() && combining_class(points[end]) != 0) ++end;
    if (end - i > 1)
      std::stable_sort(points.begin() + static_cast<std::ptrdiff_t>(i),
                       points.begin() + static_cast<std::ptrdiff_t>(end),
                       [&](utf8proc_int32_t a, utf8proc_int32_t b) { return combining_class(a) < combining_class(b); });
    i = end == i ? i + 1 : end;
  }
  // Composes in place and writes the UTF-8 over the buffer (4 bytes per code point at most).
  const utf8proc_ssize_t bytes = utf8proc_reencode(points.data(), static_cast<utf8proc_ssize_t>(points.size()), opts);
  ECHO_CHECK(bytes >= 0, "Unicode normalization failed: {}", utf8proc_errmsg(bytes));
  out.assign(reinterpret_cast<const char*>(points.data()), static_cast<std::size_t>(bytes));
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
