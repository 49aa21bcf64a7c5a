// The kernel emulator's stand-in for CUB's DeviceRadixSort (tests/emu, docs/design.md §15b): the
// one call kernels/embedding.cu makes, SortKeys of unsigned 64-bit keys over bits
// [begin_bit, end_bit), as a stable sort on the host. Like CUB, a null temp pointer is a size query,
// and a key's bits outside the range do not take part in the order. The sort runs in stream order on
// the emulated streams (cuda_emu_streams.h, included with cuda_emu.h before this header).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cub {

struct DeviceRadixSort {
  static cudaError_t SortKeys(void* temp, size_t& temp_bytes, const uint64_t* keys_in, uint64_t* keys_out,
                              int num_items, int begin_bit, int end_bit, cudaStream_t stream = nullptr) {
    if (temp == nullptr) {
      temp_bytes = static_cast<size_t>(num_items) * sizeof(uint64_t) + 1;
      return cudaSuccess;
    }
    if (num_items < 0 || begin_bit < 0 || end_bit > 64 || begin_bit > end_bit || temp_bytes == 0)
      return cudaErrorInvalidValue;
    if (!echo::emu::stream_exists(stream)) return cudaErrorInvalidResourceHandle;
    // In stream order, as CUB's kernels run.
    if (!echo::emu::is_device_range(temp, temp_bytes)) return cudaErrorInvalidValue;
    echo::emu::issue(stream, [=] {
      std::memset(temp, 0xa5, temp_bytes);  // CUB's kernels use their temp storage
      const int width = end_bit - begin_bit;
      const uint64_t mask = width == 64 ? ~uint64_t{0} : ((uint64_t{1} << width) - 1);
      std::vector<uint64_t> keys(keys_in, keys_in + num_items);
      std::stable_sort(keys.begin(), keys.end(),
                       [&](uint64_t a, uint64_t b) { return ((a >> begin_bit) & mask) < ((b >> begin_bit) & mask); });
      if (num_items > 0) std::memcpy(keys_out, keys.data(), keys.size() * sizeof(uint64_t));
    });
    return cudaSuccess;
  }
};

}  // namespace cub
