#include "apps/bench/bench_config.h"

#include <fmt/format.h>

#include "core/config/config.h"
#include "core/error.h"

namespace echo::bench {

config::Config load_with_settings(const std::string& program, const std::string& path,
                                  std::vector<std::string> overrides, const std::vector<BenchSetting>& settings,
                                  int world_size) {
  // The config's own reading of the overrides: the key however spaced, or inside a flow mapping
  // (--set "train={micro_batch: 3}").
  for (const std::string& o : overrides)
    for (const BenchSetting& s : settings)
      ECHO_INPUT_CHECK(!config::overrides_set({o}, s.key), "--set {}: {} sets '{}' from {}; use that instead", o,
                       program, s.key, s.source);
  for (const BenchSetting& s : settings) overrides.push_back(fmt::format("{}={}", s.key, s.value));
  try {
    return config::load_config(path, overrides, world_size);
  } catch (const InputError& e) {
    std::string message = e.message();
    for (const BenchSetting& s : settings) {
      const std::string as_set = fmt::format("--set {}={}", s.key, s.value);
      const std::string as_flag = s.source.rfind("--", 0) == 0 ? fmt::format("{} {}", s.source, s.value)
                                                               : fmt::format("{} ({})", s.source, s.value);
      for (size_t at = message.find(as_set); at != std::string::npos; at = message.find(as_set, at + as_flag.size()))
        message.replace(at, as_set.size(), as_flag);
    }
    throw InputError(message, e.file(), e.line());
  }
}

}  // namespace echo::bench
