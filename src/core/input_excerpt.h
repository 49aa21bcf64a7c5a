// User input quoted in a message: clipped and made printable. A 10 MB --set value or a damaged
// line of a file is named by its start and its size, never echoed whole (a message is read by a
// person, and an error message travels between ranks and through mpirun's output forwarding);
// control characters and bytes that are not UTF-8 are written as escapes, so a value holding
// "\x1b[2J" names itself instead of clearing the reader's terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace echo {

inline constexpr std::size_t kExcerptBytes = 200;

// `text` made printable (below) when it has at most `limit` bytes; else its first `limit` bytes
// (never ending inside a UTF-8 character) made printable and "... (N bytes)", N the whole size.
// Printable: tab, newline and carriage return as \t \n \r; the other C0 controls, DEL and every
// byte of an ill-formed UTF-8 sequence as \xNN; the C1 controls (U+0080..U+009F) as \u0080..\u009f;
// a backslash stays one backslash (messages are read, not parsed back). Everything else, valid
// UTF-8 of any script included, is kept.
std::string input_excerpt(std::string_view text, std::size_t limit = kExcerptBytes);

}  // namespace echo
