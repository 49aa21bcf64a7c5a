// cuda::DeferredFaults: where the INT8 linears note a NaN or an infinity in an operand without
// stopping the stream to ask (docs/design.md §2, "No per-op waits"). One 64-bit word on the
// device holds the smallest key of any fault so far (atomicMin, so the report does not depend on
// block order); the backend reads it once per step, with the loss, and raises the first fault by
// name. Plain C++ (no CUDA syntax), so host code includes it.
//
// Key: layer (24 bits) | site (8) | operand (2) | row (30): the earliest layer, then site, then
// operand, then row wins. Rows beyond 2^30 - 1 report as that row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace echo::cuda {

enum class FaultOperand : uint32_t { x = 0, w = 1, gradient = 2 };

class DeferredFaults {
 public:
  static constexpr unsigned long long kNone = ~0ull;
  static constexpr unsigned long long kRowMask = (1ull << 30) - 1;

  DeferredFaults();
  ~DeferredFaults();
  DeferredFaults(const DeferredFaults&) = delete;
  DeferredFaults& operator=(const DeferredFaults&) = delete;

  // The device word kernels atomicMin into (key(...) | min(row, kRowMask)).
  unsigned long long* slot() const { return slot_; }
  static unsigned long long key(uint32_t layer, uint32_t site, FaultOperand operand);
  // "int8 linear of layer 3, site 1 (k): row 17 of x holds a NaN or an infinity" for a recorded key.
  static std::string describe(unsigned long long recorded);
  // Waits for `stream`, reads the word and clears it; a fault recorded since the last call
  // becomes an echo::Error (the word is cleared first, so the next step starts clean).
  void raise_if_any(cudaStream_t stream);

 private:
  unsigned long long* slot_ = nullptr;
};

}  // namespace echo::cuda
