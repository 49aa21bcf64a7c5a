// How a GPU test treats a machine without a usable CUDA device: it skips, unless
// ECHO_REQUIRE_GPU=1 is set (scripts/device_check.sh sets it), in which case it fails, so a
// device check on a machine whose GPU does not work cannot report success.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/tensor.h"

namespace echo::testing {

// True when ECHO_REQUIRE_GPU is set to anything but "" or "0".
inline bool gpu_required() {
  const char* v = std::getenv("ECHO_REQUIRE_GPU");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace echo::testing

// Skips (or, under ECHO_REQUIRE_GPU=1, fails) the current test when no CUDA device is visible.
// NOTE: FAIL() and GTEST_SKIP() return from the enclosing void function, as the test body must stop.
#define ECHO_REQUIRE_DEVICE()                                                                  \
  do {                                                                                         \
    if (::echo::cuda_device_count() == 0) {                                                    \
      if (::echo::testing::gpu_required()) FAIL() << "no CUDA device but ECHO_REQUIRE_GPU is set"; \
      GTEST_SKIP() << "no CUDA device (set ECHO_REQUIRE_GPU=1 to make this a failure)";         \
    }                                                                                          \
  } while (0)
