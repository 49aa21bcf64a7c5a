// The host's memory as the kernel reports it in /proc/meminfo. One reader for every user: the CPU
// backend's start-up check (backend/cpu) and the benches' size checks and machine headers.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace echo {

// MemAvailable: what can be allocated now without swapping (the kernel's estimate, reclaimable
// page cache included); nullopt when /proc/meminfo or the line cannot be read (not Linux, a
// container hiding it), so callers can tell "unknown" from "none".
std::optional<size_t> host_memory_available_bytes();
// MemTotal, or nullopt as above.
std::optional<size_t> host_memory_total_bytes();

// The bytes of `key` ("MemAvailable") in /proc/meminfo text ("MemAvailable:  24683620 kB");
// nullopt when the key is absent or its value is not a number of kB.
std::optional<size_t> parse_meminfo_bytes(const std::string& text, const std::string& key);

}  // namespace echo
