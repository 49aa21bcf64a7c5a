// Naming the file behind a bus error. Reading a memory-mapped file that shrank after it was
// mapped (a .bin truncated or rewritten while a run reads it) raises SIGBUS, which by default
// kills the process without a word. MappedFile registers each mapping here; a SIGBUS handler
// that finds the faulting address in a registered mapping prints which file changed and exits
// with kFaultExitCode; any other SIGBUS goes to the previous handler (or the default action).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace echo::data {

inline constexpr int kFaultExitCode = 74;  // EX_IOERR

// Registers [begin, begin + size) as a mapping of `path` (installing the handler on first use).
// At most 256 live mappings are named; later ones fault as before. Thread-safe.
void register_mapping(const uint8_t* begin, size_t size, const std::string& path);
// Forgets the mapping that starts at `begin` (before it is unmapped). Thread-safe.
void unregister_mapping(const uint8_t* begin) noexcept;

}  // namespace echo::data
