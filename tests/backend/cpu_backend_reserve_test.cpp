// The CPU backend's start-up check (Backend::reserve): a plan times the ranks on the node, plus
// headroom, must fit in the host's MemAvailable, else an InputError names the numbers and what to
// lower. The arithmetic is checked on fixed numbers; reserve() itself against this host's memory.
#include <gtest/gtest.h>

#include <limits>
#include <optional>

#include "backend/backend.h"
#include "backend/cpu/host_memory_check.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "../support/test_util.h"

namespace echo::backend {
namespace {

using echo::testing::kind_and_what_of;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

void expect_contains(const std::string& message, const std::vector<std::string>& needles) {
  for (const auto& needle : needles)
    EXPECT_NE(message.find(needle), std::string::npos) << "expected '" << needle << "' in: " << message;
}

TEST(CpuReserve, TheNeedIsThePlanPlusHeadroomTimesTheRanks) {
  EXPECT_EQ(kHostHeadroomPerRank, 256 * kMiB);
  EXPECT_EQ(host_bytes_needed(1000 * kMiB, 1), 1256 * kMiB);
  EXPECT_EQ(host_bytes_needed(1000 * kMiB, 3), 3 * 1256 * kMiB);
  // Saturates instead of wrapping to a small number that would pass.
  const size_t most = std::numeric_limits<size_t>::max();
  EXPECT_EQ(host_bytes_needed(most, 1), most);
  EXPECT_EQ(host_bytes_needed(most / 2, 4), most);
}

TEST(CpuReserve, TheRefusalNamesTheNumbersAndWhatToLower) {
  // 2 x (1000 MiB + 256 MiB) = 2512 MiB = 2634022912 bytes against 2 GiB.
  const std::string got = kind_and_what_of([] {
    check_fits_host_memory(1000 * kMiB, 2, 2 * kGiB, "training this model (per rank: X)",
                           "a smaller --lever-a, or a larger --lever-b");
  });
  expect_contains(got, {"input: ", "training this model (per rank: X) does not fit in this host's memory",
                        "2 rank(s) on this node need 2 x (1000.0 MiB + 256.0 MiB headroom",
                        "= 2.45 GiB (2634022912 bytes)", "MemAvailable is 2.00 GiB (2147483648 bytes)",
                        "; a smaller --lever-a, or a larger --lever-b, or fewer ranks per node, needs less"});
  EXPECT_EQ(got.find("[at "), std::string::npos) << "an input error reads as a plain message: " << got;
  // Exactly full fits; one byte more does not.
  EXPECT_NO_THROW(check_fits_host_memory(1000 * kMiB, 2, 2512 * kMiB, "x", "y"));
  EXPECT_THROW(check_fits_host_memory(1000 * kMiB, 2, 2512 * kMiB - 1, "x", "y"), InputError);
}

// reserve() against this host's MemAvailable, read by the same reader.
class CpuReserveOnThisHost : public ::testing::Test {
 protected:
  void SetUp() override {
    available_ = host_memory_available_bytes();
    if (!available_) GTEST_SKIP() << "no MemAvailable in /proc/meminfo";
    // The halves below must leave room for the headroom and for other processes' drift.
    if (*available_ < 4 * kGiB) GTEST_SKIP() << "needs 4 GiB available, have " << *available_;
  }
  std::optional<size_t> available_;
};

TEST_F(CpuReserveOnThisHost, FarAboveMemAvailableIsRefusedAndASmallPlanPasses) {
  auto cpu = make_backend(Device::cpu);
  const size_t pib = size_t{1} << 50;
  const std::string got = kind_and_what_of([&] { cpu->reserve(pib, "a plan of 1 PiB", "less"); });
  EXPECT_EQ(host_bytes_needed(pib, 1), size_t{1125900175278080});  // 2^50 + 2^28
  expect_contains(got, {"input: ", "a plan of 1 PiB does not fit", "1 rank(s) on this node need 1 x (1024.0 TiB",
                        "(1125900175278080 bytes)", "MemAvailable is"});
  EXPECT_NO_THROW(cpu->reserve(kMiB, "a plan of 1 MiB", "less"));
}

TEST_F(CpuReserveOnThisHost, TheRanksOnTheNodeMultiplyThePlan) {
  // Half of MemAvailable plus 64 MiB: one rank fits (with its 256 MiB headroom); three do not.
  const size_t plan = *available_ / 2 + 64 * kMiB;
  EXPECT_NO_THROW(make_backend(Device::cpu, {0, 1})->reserve(plan, "half the host", "less"));
  const std::string got = kind_and_what_of([&] {
    make_backend(Device::cpu, {0, 3})->reserve(plan, "half the host", "less");
  });
  expect_contains(got, {"input: ", "half the host does not fit", "3 rank(s) on this node need 3 x (",
                        std::to_string(host_bytes_needed(plan, 3)) + " bytes"});
}

TEST(CpuReserve, ZeroRanksOnTheNodeIsAnInternalError) {
  EXPECT_THROW(make_backend(Device::cpu, {0, 0}), Error);
}

}  // namespace
}  // namespace echo::backend
