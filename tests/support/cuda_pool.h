// The bytes in use in the current device's default stream-ordered memory pool (the pool that
// CudaBackend's start-up reservation fills): for GPU tests that check what an allocation drew
// from it. Needs the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace echo::testing {

inline uint64_t cuda_pool_used_bytes() {
  int device = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  cudaMemPool_t pool;
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, device), cudaSuccess);
  uint64_t used = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  return used;
}

}  // namespace echo::testing
