// The config of a benchmark that sets some keys itself (the TP size from the number of ranks, the
// batch from --batch): the user's --set overrides first, the bench's settings over them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace echo::bench {

// A config key the bench sets from its own flags, and the flag (or fact) that sets it.
struct BenchSetting {
  std::string key;
  int64_t value;
  std::string source;  // "--batch", or "the number of ranks"
};

// The config at `path` with `settings` applied after the user's --set overrides. A --set that sets
// one of those keys is refused (it would be overridden unseen), and a config check failing on one
// names its source ("--batch 2147483647: ...", "the number of ranks (3): ...") instead of a --set
// the user never typed. `program` names the bench in the refusal.
config::Config load_with_settings(const std::string& program, const std::string& path,
                                  std::vector<std::string> overrides, const std::vector<BenchSetting>& settings,
                                  int world_size);

}  // namespace echo::bench
