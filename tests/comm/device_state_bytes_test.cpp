// device_echo_state_bytes (comm/echo/device_state_bytes.h), worked by hand for n = 1000 values at
// 4 bits in groups of 128: 8 groups, codes 7 x 64 + 52 = 500 bytes, fp16 scale and zero per group
// 8 x 4 = 32 bytes, so 532 wire bytes (1032 at 8 bits); m1 and m2 are 4000 bytes each per
// direction, x' and the work copy 4000 each, and four code buffers of the whole tensor's wire.
#include "comm/echo/device_state_bytes.h"

#include <gtest/gtest.h>

namespace echo::comm {
namespace {

config::CommConfig four_bit() {
  config::CommConfig c;
  c.bits = 4;
  c.group_size = 128;
  return c;
}

TEST(DeviceEchoStateBytes, HandWorked) {
  const config::CommConfig c = four_bit();
  EXPECT_EQ(device_echo_state_bytes(c, 2, 1000, false), 2 * 2 * 4000 + 2 * 4000 + 4 * 532);
  EXPECT_EQ(device_echo_state_bytes(c, 2, 1000, true), 1 * 2 * 4000 + 2 * 4000 + 4 * 532) << "an evaluation";
  config::CommConfig eight = c;
  eight.bits = 8;
  EXPECT_EQ(device_echo_state_bytes(eight, 4, 1000, false), 2 * 2 * 4000 + 2 * 4000 + 4 * 1032);
  config::CommConfig early = c;
  early.early_site_8bit = true;  // the first sites' 8-bit codec is the widest
  EXPECT_EQ(device_echo_state_bytes(early, 2, 1000, false), 2 * 2 * 4000 + 2 * 4000 + 4 * 1032);
  config::CommConfig baseline = c;
  baseline.allreduce = config::AllReduceKind::two_collective;  // the same engine, unpipelined
  EXPECT_EQ(device_echo_state_bytes(baseline, 2, 1000, false), 2 * 2 * 4000 + 2 * 4000 + 4 * 532);
  config::CommConfig backward_exact = c;
  backward_exact.backward = false;
  EXPECT_EQ(device_echo_state_bytes(backward_exact, 2, 1000, false), 1 * 2 * 4000 + 2 * 4000 + 4 * 532);
}

TEST(DeviceEchoStateBytes, NoneWithoutEchoOrTp) {
  const config::CommConfig c = four_bit();
  EXPECT_EQ(device_echo_state_bytes(c, 1, 1000, false), 0u) << "tp 1: no all-reduce";
  EXPECT_EQ(device_echo_state_bytes(c, 2, 0, false), 0u);
  for (auto kind : {config::AllReduceKind::exact, config::AllReduceKind::exact_fp32}) {
    config::CommConfig exact = c;
    exact.allreduce = kind;
    EXPECT_EQ(device_echo_state_bytes(exact, 2, 1000, false), 0u);
  }
  config::CommConfig off = c;
  off.forward = false;
  EXPECT_EQ(device_echo_state_bytes(off, 2, 1000, true), 0u) << "an evaluation with the forward sites exact";
}

}  // namespace
}  // namespace echo::comm
