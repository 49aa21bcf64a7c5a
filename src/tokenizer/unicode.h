// UTF-8 helpers for the tokenizer: validation and repair, Unicode normalization (utf8proc), and
// GPT-2's byte <-> character table that byte-level BPE vocabularies are written in.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace echo::tokenizer {

bool is_valid_utf8(std::string_view text);

// `text` with every ill-formed sequence replaced by U+FFFD, one per maximal subpart (the
// Unicode-recommended practice, which Rust's from_utf8_lossy and the WHATWG decoder follow).
std::string repair_utf8(std::string_view text);

// How many U+FFFD repair_utf8 would put into `text` (0 for valid UTF-8).
std::size_t count_ill_formed_utf8(std::string_view text);

void append_utf8(std::string& out, char32_t codepoint);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// `text` (valid UTF-8) in the given normal form. Returns false and leaves `out` alone when the
// text is already known to be normalized (pure ASCII), so the caller can keep using its view.
bool normalize(std::string_view text, NormalForm form, std::string& out);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every byte has a visible, non-whitespace character.
constexpr std::array<char32_t, 256> make_byte_to_codepoint() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}
inline constexpr std::array<char32_t, 256> kByteToCodepoint = make_byte_to_codepoint();
// The largest codepoint in the table (U+0143), so the inverse fits a small array.
inline constexpr char32_t kMaxByteCodepoint = 0x143;

// The byte a character of the table stands for, or -1 for a character outside the table.
int codepoint_to_byte(char32_t codepoint);

// The UTF-8 of the table's characters for each byte of `bytes` (what ByteLevel pre-tokenization
// produces and what vocab keys are written in).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace echo::tokenizer
