// The kernel emulator itself (tests/emu/cuda_emu.h): every thread of a 3-D grid runs once with its
// built-in variables; a barrier orders shared-memory writes before reads in every thread order;
// a butterfly shuffle gives the hand-worked lane values; a launch shape the hardware refuses is a
// launch error and runs nothing; a divergent barrier, a shuffle after a lane returned and a
// deadlock abort naming the kernel, and so do two __syncthreads pairing up and a host pointer given
// to a kernel; the runtime refuses an event that does not exist and a copy whose direction does
// not match its pointers; fresh device memory is not zero; the CUB stand-in sorts stably over a
// bit range; streams run beside the host and each other, ordered only by events, the legacy
// stream's implicit waits (blocking streams only) and stream-ordered frees, and copies block the
// host where the runtime documents that they do.
// Compiled with cuda_emu.h force-included.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <thread>
#include <vector>

#include "launch.cuh"

namespace {

__global__ void record_indices_kernel(int* seen, unsigned* coords) {
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned flat = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  seen[flat] += 1;
  coords[flat * 6 + 0] = threadIdx.x;
  coords[flat * 6 + 1] = threadIdx.y;
  coords[flat * 6 + 2] = threadIdx.z;
  coords[flat * 6 + 3] = blockIdx.x;
  coords[flat * 6 + 4] = blockIdx.y;
  coords[flat * 6 + 5] = blockIdx.z;
}

// out[i] = in[i] + in[(i + 1) % n] of the block's tile, through shared memory.
__global__ void neighbour_sum_kernel(const int* in, int* out) {
  __shared__ int tile[256];
  const unsigned i = threadIdx.x;
  tile[i] = in[blockIdx.x * blockDim.x + i];
  __syncthreads();
  out[blockIdx.x * blockDim.x + i] = tile[i] + tile[(i + 1) % blockDim.x];
}

__global__ void butterfly_kernel(const float* in, float* out, int lane_mask) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, in[threadIdx.x], lane_mask);
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_after_return_kernel(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Half of warp 0 shuffles while the rest of the block waits at the barrier: neither can open.
__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x < 16) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  } else {
    __syncthreads();
  }
}

// Even threads wait at one __syncthreads, odd threads at another: one barrier on the GPU, but
// not the same place in the source.
__global__ void two_barriers_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// Spins until the gate (pinned host memory) opens, then writes `value`.
__global__ void gated_write_kernel(const int* gate, int* out, int value) {
  while (__atomic_load_n(gate, __ATOMIC_ACQUIRE) == 0) __nanosleep(1000);
  *out = value;
}

__global__ void copy_one_kernel(const int* in, int* out) { *out = *in; }

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

TEST(KernelEmulator, EveryThreadOfA3dGridRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const size_t n = 3 * 2 * 2 * 4 * 3 * 2;
  int* seen = device_copy(std::vector<int>(n, 0));
  unsigned* coords = device_copy(std::vector<unsigned>(n * 6, 99));
  ECHO_LAUNCH(grid, block, 0, nullptr, record_indices_kernel)(seen, coords);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> s = host_copy(seen, n);
  const std::vector<unsigned> c = host_copy(coords, n * 6);
  for (size_t flat = 0; flat < n; ++flat) {
    ASSERT_EQ(s[flat], 1) << flat;
    const size_t thread = flat % 24, blk = flat / 24;
    EXPECT_EQ(c[flat * 6 + 0], thread % 4);
    EXPECT_EQ(c[flat * 6 + 1], thread / 4 % 3);
    EXPECT_EQ(c[flat * 6 + 2], thread / 12);
    EXPECT_EQ(c[flat * 6 + 3], blk % 3);
    EXPECT_EQ(c[flat * 6 + 4], blk / 3 % 2);
    EXPECT_EQ(c[flat * 6 + 5], blk / 6);
  }
  cudaFree(seen);
  cudaFree(coords);
}

TEST(KernelEmulator, ABarrierOrdersSharedMemoryInEveryThreadOrder) {
  std::vector<int> in(3 * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(7 * i + 3);
  int* d_in = device_copy(in);
  int* d_out = device_copy(std::vector<int>(in.size(), 0));
  ECHO_LAUNCH(3, 256, 0, nullptr, neighbour_sum_kernel)(d_in, d_out);
  const std::vector<int> out = host_copy(d_out, in.size());
  for (size_t b = 0; b < 3; ++b)
    for (size_t i = 0; i < 256; ++i) ASSERT_EQ(out[b * 256 + i], in[b * 256 + i] + in[b * 256 + (i + 1) % 256]);
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(KernelEmulator, AButterflyShuffleSwapsTheLanesItPairs) {
  std::vector<float> in(64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.5f + static_cast<float>(i);
  float* d_in = device_copy(in);
  float* d_out = device_copy(std::vector<float>(64, 0.0f));
  for (int lane_mask : {1, 6, 16}) {
    ECHO_LAUNCH(1, 64, 0, nullptr, butterfly_kernel)(d_in, d_out, lane_mask);
    const std::vector<float> out = host_copy(d_out, 64);
    for (int t = 0; t < 64; ++t) {
      const int partner = (t / 32) * 32 + ((t % 32) ^ lane_mask);  // lanes pair within their warp
      ASSERT_EQ(out[static_cast<size_t>(t)], in[static_cast<size_t>(partner)]) << "mask " << lane_mask << " t " << t;
    }
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(KernelEmulator, ALaunchShapeTheHardwareRefusesIsALaunchErrorAndRunsNothing) {
  int* seen = device_copy(std::vector<int>(2048, 0));
  unsigned* coords = device_copy(std::vector<unsigned>(2048 * 6, 0));
  ECHO_LAUNCH(1, 1025, 0, nullptr, record_indices_kernel)(seen, coords);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared, as the runtime does
  ECHO_LAUNCH(dim3(1, 65536, 1), 1, 0, nullptr, record_indices_kernel)(seen, coords);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ECHO_LAUNCH(0, 32, 0, nullptr, record_indices_kernel)(seen, coords);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  for (int v : host_copy(seen, 2048)) ASSERT_EQ(v, 0);
  cudaFree(seen);
  cudaFree(coords);
}

// NOTE: threadsafe death tests re-run the binary for the child instead of forking a process that
// may hold other threads (ASan's, the runtime's).
class KernelEmulatorDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(KernelEmulatorDeathTest, ABarrierNotEveryThreadReachesAborts) {
  int* out = device_copy(std::vector<int>(64, 0));
  const auto launch = [out] {
    ECHO_LAUNCH(1, 64, 0, nullptr, divergent_barrier_kernel)(out);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch(),
               "divergent_barrier_kernel.*__syncthreads reached by 63 threads after 1 threads of the block returned");
  cudaFree(out);
}

TEST_F(KernelEmulatorDeathTest, AShuffleAfterALaneReturnedAborts) {
  int* out = device_copy(std::vector<int>(32, 0));
  const auto launch = [out] {
    ECHO_LAUNCH(1, 32, 0, nullptr, shuffle_after_return_kernel)(out);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch(), "shuffle_after_return_kernel.*__shfl_xor_sync with the full mask after lane 3 returned");
  cudaFree(out);
}

TEST_F(KernelEmulatorDeathTest, AShuffleInAPartialWarpAborts) {
  float* in = device_copy(std::vector<float>(40, 1.0f));
  float* out = device_copy(std::vector<float>(40, 0.0f));
  const auto launch = [in, out] {
    ECHO_LAUNCH(1, 40, 0, nullptr, butterfly_kernel)(in, out, 1);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch(), "in a warp of 8 threads");
  cudaFree(in);
  cudaFree(out);
}

TEST_F(KernelEmulatorDeathTest, TwoBarriersInTheSourceDoNotPairUp) {
  int* out = device_copy(std::vector<int>(64, 0));
  const auto launch = [out] {
    ECHO_LAUNCH(1, 64, 0, nullptr, two_barriers_kernel)(out);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch(), "two_barriers_kernel.*__syncthreads pairs threads waiting at different places");
  cudaFree(out);
}

TEST_F(KernelEmulatorDeathTest, AKernelGivenHostMemoryAborts) {
  std::vector<float> host(64, 1.0f), also_host(64, 0.0f);
  float* in = host.data();
  float* out = also_host.data();
  const auto launch = [in, out] {
    ECHO_LAUNCH(1, 32, 0, nullptr, butterfly_kernel)(in, out, 1);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch(), "butterfly_kernel: pointer argument 0 .* is not device memory");
}

TEST_F(KernelEmulatorDeathTest, ThreadsWaitingAtDifferentBarriersAreADeadlock) {
  int* out = device_copy(std::vector<int>(64, 0));
  const auto launch = [out] {
    ECHO_LAUNCH(1, 64, 0, nullptr, deadlock_kernel)(out);
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch(), "deadlock_kernel.*deadlock: 0 running, 48 at __syncthreads, 16 in a warp shuffle");
  cudaFree(out);
}

TEST(KernelEmulator, ACopyWhoseDirectionDoesNotMatchItsPointersIsRefused) {
  std::vector<int> host(16, 5);
  int* device = device_copy(host);
  EXPECT_EQ(cudaMemcpy(device, host.data(), 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), device, 68, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(cudaMemcpy(host.data(), device, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);  // never allocated by cudaMalloc
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaErrorInvalidValue);  // twice
  (void)cudaGetLastError();
}

TEST(KernelEmulator, AnEventThatDoesNotExistIsAnInvalidHandle) {
  cudaEvent_t bogus = reinterpret_cast<cudaEvent_t>(0x1234);
  EXPECT_EQ(cudaEventQuery(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventSynchronize(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, bogus, 0), cudaErrorInvalidResourceHandle);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, e, 0), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorInvalidResourceHandle);  // destroyed
  (void)cudaGetLastError();
}

TEST(KernelEmulator, FreshDeviceMemoryIsNotZero) {
  // A kernel reading memory nothing wrote must not get zeros by luck: all-ones bytes, NaN as f32.
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 64, nullptr), cudaSuccess);
  const std::vector<float> f = host_copy(static_cast<const float*>(p), 16);
  for (float v : f) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, size_t{2} << 20), cudaSuccess);  // the IPC-exportable kind too
  const std::vector<int32_t> i = host_copy(static_cast<const int32_t*>(p), 16);
  for (int32_t v : i) EXPECT_EQ(v, -1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(KernelEmulator, TheCubStandInSortsStablyOverTheBitRange) {
  // Keys whose bits 0..7 are noise and whose bits 8..15 order them; stable among equal keys.
  uint64_t* in = device_copy(std::vector<uint64_t>{0x0301, 0x0102, 0x0303, 0x0104, 0xff0205, 0x0106});
  uint64_t* out = device_copy(std::vector<uint64_t>(6, 0));
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(nullptr, bytes, in, nullptr, 6, 8, 16), cudaSuccess);
  char* temp = device_copy(std::vector<char>(bytes));
  ASSERT_EQ(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, 6, 8, 16), cudaSuccess);
  EXPECT_EQ(host_copy(out, 6), (std::vector<uint64_t>{0x0102, 0x0104, 0x0106, 0xff0205, 0x0301, 0x0303}));
  for (void* p : {static_cast<void*>(in), static_cast<void*>(out), static_cast<void*>(temp)}) cudaFree(p);
}

// Streams (cuda_emu_streams.h). A gate: pinned host memory a kernel spins on until the host opens
// it, so a stream's later work is known not to have run yet.
struct Gate {
  Gate() {
    EXPECT_EQ(cudaMallocHost(reinterpret_cast<void**>(&flag), sizeof(int)), cudaSuccess);
    close();
  }
  ~Gate() { cudaFreeHost(flag); }
  void close() { __atomic_store_n(flag, 0, __ATOMIC_SEQ_CST); }
  void open() { __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST); }
  // Opens the gate from another thread after `ms`, while the host blocks in a synchronizing call.
  std::thread open_after(int ms) {
    return std::thread([this, ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      open();
    });
  }
  int* flag = nullptr;
};

TEST(KernelEmulatorStreams, AStreamDoesNotWaitForAnotherWithoutAnEvent) {
  Gate gate;
  int* data = device_copy(std::vector<int>{1});
  int* seen = device_copy(std::vector<int>{0});
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  cudaEvent_t written = nullptr, copied = nullptr;
  ASSERT_EQ(cudaEventCreate(&written), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&copied), cudaSuccess);

  // No wait: b's copy runs while a's write waits at the gate, and reads the old value.
  ECHO_LAUNCH(1, 1, 0, a, gated_write_kernel)(gate.flag, data, 2);
  ASSERT_EQ(cudaEventRecord(written, a), cudaSuccess);
  ECHO_LAUNCH(1, 1, 0, b, copy_one_kernel)(data, seen);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(written), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);  // kept as the last error, as the runtime keeps it
  gate.open();
  ASSERT_EQ(cudaEventSynchronize(written), cudaSuccess);
  EXPECT_EQ(host_copy(seen, 1)[0], 1);
  EXPECT_EQ(host_copy(data, 1)[0], 2);

  // With cudaStreamWaitEvent: b's copy waits for a's write.
  gate.close();
  ECHO_LAUNCH(1, 1, 0, a, gated_write_kernel)(gate.flag, data, 3);
  ASSERT_EQ(cudaEventRecord(written, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, written, 0), cudaSuccess);
  ECHO_LAUNCH(1, 1, 0, b, copy_one_kernel)(data, seen);
  ASSERT_EQ(cudaEventRecord(copied, b), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaEventQuery(copied), cudaErrorNotReady);
  (void)cudaGetLastError();
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(host_copy(seen, 1)[0], 3);

  for (cudaEvent_t e : {written, copied}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  for (cudaStream_t st : {a, b}) EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
  cudaFree(data);
  cudaFree(seen);
}

TEST(KernelEmulatorStreams, TheLegacyStreamWaitsForBlockingStreamsOnly) {
  Gate gate;
  int* data = device_copy(std::vector<int>{1});
  int* seen = device_copy(std::vector<int>{0});
  cudaStream_t blocking = nullptr, non_blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t legacy_done = nullptr;
  ASSERT_EQ(cudaEventCreate(&legacy_done), cudaSuccess);

  // Behind a non-blocking stream's gated write, a legacy-stream copy runs at once (old value).
  ECHO_LAUNCH(1, 1, 0, non_blocking, gated_write_kernel)(gate.flag, data, 4);
  ECHO_LAUNCH(1, 1, 0, nullptr, copy_one_kernel)(data, seen);
  ASSERT_EQ(cudaEventRecord(legacy_done, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(legacy_done), cudaSuccess);
  EXPECT_EQ(host_copy(seen, 1)[0], 1);
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(non_blocking), cudaSuccess);

  // Behind a blocking stream's, it waits (new value), and the blocking stream's later work waits
  // for it in turn: the write of 6 lands after the copy.
  gate.close();
  ECHO_LAUNCH(1, 1, 0, blocking, gated_write_kernel)(gate.flag, data, 5);
  ECHO_LAUNCH(1, 1, 0, nullptr, copy_one_kernel)(data, seen);
  ASSERT_EQ(cudaEventRecord(legacy_done, nullptr), cudaSuccess);
  ECHO_LAUNCH(1, 1, 0, blocking, gated_write_kernel)(gate.flag, data, 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaEventQuery(legacy_done), cudaErrorNotReady);
  (void)cudaGetLastError();
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  EXPECT_EQ(host_copy(seen, 1)[0], 5);
  EXPECT_EQ(host_copy(data, 1)[0], 6);

  EXPECT_EQ(cudaEventDestroy(legacy_done), cudaSuccess);
  for (cudaStream_t st : {blocking, non_blocking}) EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
  cudaFree(data);
  cudaFree(seen);
}

TEST(KernelEmulatorStreams, CopiesBlockTheHostWhereTheRuntimeSaysTheyDo) {
  Gate gate;
  int* data = device_copy(std::vector<int>{1});
  int* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(int)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);

  // cudaMemcpyAsync into pinned memory returns at once: the copy has not run.
  ECHO_LAUNCH(1, 1, 0, s, gated_write_kernel)(gate.flag, data, 7);
  ASSERT_EQ(cudaMemcpyAsync(pinned, data, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(__atomic_load_n(pinned, __ATOMIC_SEQ_CST), -1);  // fresh pinned memory: all-ones bytes
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*pinned, 7);

  // cudaMemcpy into pageable memory (the legacy stream: after the blocking stream's write)
  // returns only when done.
  gate.close();
  ECHO_LAUNCH(1, 1, 0, s, gated_write_kernel)(gate.flag, data, 8);
  std::thread opener = gate.open_after(30);
  int pageable = 0;
  ASSERT_EQ(cudaMemcpy(&pageable, data, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  opener.join();
  EXPECT_EQ(pageable, 8);

  // A copy from pageable memory is staged at the call: the caller may reuse its buffer at once.
  gate.close();
  ECHO_LAUNCH(1, 1, 0, s, gated_write_kernel)(gate.flag, data, 9);
  int source = 10;
  ASSERT_EQ(cudaMemcpyAsync(data, &source, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  source = 11;
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(host_copy(data, 1)[0], 10);

  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  cudaFreeHost(pinned);
  cudaFree(data);
}

TEST(KernelEmulatorStreams, AStreamOrderedFreeWaitsForTheWorkBeforeIt) {
  // Freed at the call, the gated kernel's write would land in freed memory (ASan aborts the test).
  Gate gate;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 64, s), cudaSuccess);
  ECHO_LAUNCH(1, 1, 0, s, gated_write_kernel)(gate.flag, static_cast<int*>(p), 12);
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, s), cudaErrorInvalidValue);  // twice: refused at the call
  (void)cudaGetLastError();
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);  // destroyed
  (void)cudaGetLastError();
}

TEST(KernelEmulatorStreams, A2dCopyMovesRowsBetweenPitches) {
  // 3 rows of 5 bytes: from a host buffer of pitch 8 into device memory of pitch 6 and back into
  // one of pitch 7; the bytes between rows are not touched.
  std::vector<unsigned char> host(24);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i + 1);
  unsigned char* device = device_copy(std::vector<unsigned char>(18, 0));
  ASSERT_EQ(cudaMemcpy2D(device, 6, host.data(), 8, 5, 3, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<unsigned char> back(21, 0);
  ASSERT_EQ(cudaMemcpy2D(back.data(), 7, device, 6, 5, 3, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 7; ++c) EXPECT_EQ(back[r * 7 + c], c < 5 ? host[r * 8 + c] : 0) << r << "," << c;
  EXPECT_EQ(cudaMemcpy2D(device, 4, host.data(), 8, 5, 3, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaMemcpy2D(device, 6, host.data(), 8, 5, 4, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);  // past the end
  (void)cudaGetLastError();
  cudaFree(device);
}

// A stream-ordered allocation may not be touched before its stream reaches it; pool memory's
// cudaFree does not wait for the kernels still queued on it. ASan names both.
TEST_F(KernelEmulatorDeathTest, PoolMemoryIsOffLimitsUntilItsStreamGetsThere) {
  const auto run = [] {
    Gate gate;
    cudaStream_t a = nullptr, b = nullptr;
    cudaStreamCreate(&a);
    cudaStreamCreate(&b);
    int* held = device_copy(std::vector<int>{0});
    ECHO_LAUNCH(1, 1, 0, a, gated_write_kernel)(gate.flag, held, 1);  // stream a waits at the gate
    void* p = nullptr;
    cudaMallocAsync(&p, 64, a);
    ECHO_LAUNCH(1, 1, 0, b, copy_one_kernel)(held, static_cast<int*>(p));  // stream b, no event
    cudaStreamSynchronize(b);
  };
  EXPECT_DEATH(run(), "use-after-poison");
}

TEST_F(KernelEmulatorDeathTest, CudaFreeOfPoolMemoryDoesNotWaitForItsReaders) {
  const auto run = [] {
    Gate gate;
    cudaStream_t s = nullptr;
    cudaStreamCreate(&s);
    void* p = nullptr;
    cudaMallocAsync(&p, 64, s);
    ECHO_LAUNCH(1, 1, 0, s, gated_write_kernel)(gate.flag, static_cast<int*>(p), 1);
    cudaFree(p);  // the runtime assumes every access has completed
    gate.open();
    cudaStreamSynchronize(s);
  };
  EXPECT_DEATH(run(), "heap-use-after-free");
}

}  // namespace
