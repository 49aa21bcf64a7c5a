// The GPU each rank of a multi-rank GPU test runs on: node-local rank % device count, as the
// trainer (backend/cuda make_cuda_backend) and echo_ipc_bench choose. On a machine with several
// GPUs the cross-GPU paths then run (peer access, stores into a peer GPU, flags across devices);
// with one GPU every rank shares it. ECHO_TEST_SAME_GPU=1 keeps every rank on device 0, the
// same-GPU paths (scripts/device_check.sh runs both where there are two GPUs or more).
// A test file registers it once, at namespace scope:
//   const auto* const kLocalGpu = ::testing::AddGlobalTestEnvironment(new echo::testing::NodeLocalGpu);
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "core/tensor.h"
#include "cuda_check.h"
#include "dist/communicator.h"
#include "dist/world.h"

namespace echo::testing {

class NodeLocalGpu : public ::testing::Environment {
 public:
  // After MPI_Init (tests/support/mpi_test_main.cpp initializes MPI before RUN_ALL_TESTS), before
  // any test touches the device.
  void SetUp() override {
    const int count = cuda_device_count();
    if (count == 0) return;  // each test skips (or fails under ECHO_REQUIRE_GPU=1) by itself
    const char* same = std::getenv("ECHO_TEST_SAME_GPU");
    const bool same_gpu = same != nullptr && same[0] != '\0' && std::strcmp(same, "0") != 0;
    const int local_rank = dist::node_place(dist::Communicator::borrow(MPI_COMM_WORLD)).local_rank;
    CUDA_CHECK(cudaSetDevice(same_gpu ? 0 : local_rank % count));
  }
};

}  // namespace echo::testing
