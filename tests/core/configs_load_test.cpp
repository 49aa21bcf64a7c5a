// Every config shipped in configs/ loads and validates (for its own tp as the world size).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/config/config.h"

namespace echo::config {

TEST(ShippedConfigs, AllLoad) {
  const auto dir = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const Config c = load_config(entry.path().string());
    EXPECT_NO_THROW(load_config(entry.path().string(), {}, c.parallel.tp));
    ++loaded;
  }
  EXPECT_GE(loaded, 5);
}

}  // namespace echo::config
