// core/host_memory: the one /proc/meminfo reader (the CPU backend's start-up check, the benches).
#include "core/host_memory.h"

#include <gtest/gtest.h>

namespace echo {
namespace {

const char* kMeminfo =
    "MemTotal:       24683620 kB\n"
    "MemFree:         1234567 kB\n"
    "MemAvailableX:         1 kB\n"
    "MemAvailable:   20000000 kB\n"
    "Broken:              12 MB\n";

TEST(HostMemory, ParsesTheKeyWholeInKibibytes) {
  EXPECT_EQ(parse_meminfo_bytes(kMeminfo, "MemTotal"), size_t{24683620} * 1024);
  EXPECT_EQ(parse_meminfo_bytes(kMeminfo, "MemAvailable"), size_t{20000000} * 1024);  // not MemAvailableX
  EXPECT_EQ(parse_meminfo_bytes(kMeminfo, "MemAvail"), std::nullopt);  // a prefix is not the key
  EXPECT_EQ(parse_meminfo_bytes(kMeminfo, "SwapTotal"), std::nullopt);
  EXPECT_EQ(parse_meminfo_bytes(kMeminfo, "Broken"), std::nullopt) << "only kB is the kernel's unit";
  EXPECT_EQ(parse_meminfo_bytes("", "MemTotal"), std::nullopt);
}

TEST(HostMemory, ReadsThisHost) {
  const auto total = host_memory_total_bytes(), available = host_memory_available_bytes();
  if (!total) GTEST_SKIP() << "no /proc/meminfo";
  ASSERT_TRUE(available);
  EXPECT_GT(*available, 0u);
  EXPECT_LE(*available, *total);
}

}  // namespace
}  // namespace echo
