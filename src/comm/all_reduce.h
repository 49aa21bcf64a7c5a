// The all-reduce interface the model calls at every tensor-parallel site: an in-place sum of
// a tensor over the TP group, at a named site (index in visiting order, pass direction).
// begin_pass() marks the start of every forward and backward pass, so implementations can
// keep per-pass state (the Echo compensator resets there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/tensor.h"

namespace echo::comm {

class SegmentReduce;

enum class Direction : uint8_t { forward, backward };
const char* to_string(Direction d);

struct Site {
  int index = 0;  // order in which the pass visits the site: 0 .. 2L-1
  Direction direction = Direction::forward;
};
std::string to_string(const Site& s);  // e.g. "forward site 3"

class AllReduce {
 public:
  virtual ~AllReduce() = default;

  virtual void begin_pass(Direction direction) { (void)direction; }

  // x <- sum over the group of every rank's x; contiguous, same length on every rank. A host f32
  // tensor is reduced in place; a bf16 or device tensor goes through an f32 host copy (unless an
  // implementation serves device tensors itself, as NcclAllReduce does).
  virtual void all_reduce(Tensor& x, Site site);
  virtual void all_reduce(std::span<float> x, Site site) = 0;

  virtual std::string name() const = 0;
  // Bytes this rank sends for one call on n elements at the given site.
  virtual size_t wire_bytes_per_rank(size_t n, Site site) const = 0;
  // The host engine that moves the bytes (its transport and time split), null where the
  // implementation has none (NCCL).
  virtual SegmentReduce* engine() const { return nullptr; }
  // Raises a NaN/Inf fault a device path noted without waiting since the last call (Echo over
  // NCCL); nothing to do for the others. Called once per step, with the loss read.
  virtual void raise_deferred_faults() {}
};

// "echo over shm", "exact over mpi", "nccl (bf16)": the implementation and its transport, for logs.
std::string describe(const AllReduce& ar);

}  // namespace echo::comm
