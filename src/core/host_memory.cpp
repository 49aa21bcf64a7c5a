// /proc/meminfo, read in one place (see host_memory.h).
#include "core/host_memory.h"

#include <fstream>
#include <sstream>

namespace echo {
namespace {

std::optional<size_t> read_meminfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_meminfo_bytes(text.str(), key);
}

}  // namespace

std::optional<size_t> parse_meminfo_bytes(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    // NOTE: the key must match whole: "MemAvailable" is not "MemAvailableX" nor a prefix of another.
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ':') continue;
    std::istringstream fields(line.substr(key.size() + 1));
    unsigned long long kib = 0;
    std::string unit;
    if (!(fields >> kib) || !(fields >> unit) || unit != "kB") return std::nullopt;
    return static_cast<size_t>(kib) * 1024;
  }
  return std::nullopt;
}

std::optional<size_t> host_memory_available_bytes() { return read_meminfo("MemAvailable"); }
std::optional<size_t> host_memory_total_bytes() { return read_meminfo("MemTotal"); }

}  // namespace echo
