// Reading a whole small file (a config, tokenizer.json, a checkpoint's JSON, a dataset sidecar)
// into memory, with one set of refusals for all of them. Why not an ifstream: it opens a
// directory without complaint and then reads nothing, so a directory passed where a file was
// meant reads as an empty file, and every caller restated the same checks.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <string>

namespace echo {

inline constexpr std::size_t kAnyFileSize = std::numeric_limits<std::size_t>::max();

// The file's bytes, or nullopt with `why` set to the reason in a few words ("No such file or
// directory", "it is a directory", "it is larger than 65536 bytes"): for callers with their own
// error format (the config loader's "path: message").
std::optional<std::string> try_read_text_file(const std::string& path, std::string& why,
                                              std::size_t max_bytes = kAnyFileSize);

// The file's bytes; an InputError "cannot read <what>: <why>" otherwise, `what` naming the file
// with its role ("tokenizer.json '/m/tokenizer.json'").
std::string read_text_file(const std::string& path, const std::string& what, std::size_t max_bytes = kAnyFileSize);

// True only when nothing at all is at `path` (lstat: no such entry, or a parent that is not a
// directory): what lets a caller skip an optional file. Anything else there (a directory, a FIFO,
// a dangling symbolic link, a name that cannot be looked at) is present, and its reader says why
// it cannot be read instead of the caller calling it missing.
bool is_absent(const std::string& path);

// Why `path`, which is not absent, cannot be followed to what it names, in a few words: "it is a
// symbolic-link loop", "it is a symbolic link to 'x', which does not exist", or the system's
// reason; "" when it can. For the "does not exist" a caller would otherwise say of such a name.
std::string why_unresolvable(const std::string& path);

// Refuses, as an InputError, a name a caller needs: "<subject> does not exist<absent_hint>" when
// nothing is there, "<subject> cannot be resolved: <why>" for a link that leads nowhere or round in
// a loop. `subject` names the file with its role ("checkpoint '/r/x'"); `absent_hint` says how to
// make the missing thing ("; run `bash scripts/get_data.sh` ...").
void require_resolvable(const std::string& path, const std::string& subject, const std::string& absent_hint = "");

}  // namespace echo
