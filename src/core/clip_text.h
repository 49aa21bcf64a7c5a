// User input quoted in a message, clipped: a 10 MB --set value or a damaged line of a file is
// named by its start and its size, never echoed whole (a message is read by a person, and an
// error message travels between ranks and through mpirun's output forwarding).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace echo {

inline constexpr std::size_t kClipBytes = 200;

// `text` itself when it has at most `limit` bytes; else its first `limit` bytes (never ending
// inside a UTF-8 character) and "... (N bytes)".
inline std::string clip_text(std::string_view text, std::size_t limit = kClipBytes) {
  if (text.size() <= limit) return std::string(text);
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

}  // namespace echo
