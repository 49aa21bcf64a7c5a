// The max / sum reductions of the vocab-parallel cross-entropy (and of the INT8 linear's
// scales) over the tensor-parallel group, in place. Every rank calls them in the same order with
// the same lengths (they are collectives).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/dtype.h"

namespace echo::dist {
class Communicator;
}

namespace echo::backend {

enum class ReduceOp : uint8_t { max, sum };

// In place on n device values (f32 or f64), enqueued on `stream` (a cudaStream_t) with no host wait.
using DeviceReduce = std::function<void(void* data, int64_t n, DType dtype, ReduceOp op, void* stream)>;

struct TpReducer {
  // On host doubles (MPI_Allreduce); a device backend copies its values out and back.
  std::function<void(std::span<double>)> max;
  std::function<void(std::span<double>)> sum;
  // The identity (one rank): a device backend may then skip the host round trip altogether.
  bool local = false;
  // NCCL between ranks that each drive their own GPU (comm::make_device_tp_reduce). Empty where
  // that cannot run (ranks share a GPU, no NCCL, the CPU backend); the device backend then goes
  // through max / sum. See docs/design.md §2.1, "No per-op waits".
  DeviceReduce device = {};
};

// The identity reducer, for tp = 1.
TpReducer make_local_reducer();

// MPI_Allreduce of doubles (MPI_MAX / MPI_SUM) on tp.
// NOTE: the reducer keeps tp's MPI_Comm handle, not the Communicator: tp must outlive it.
TpReducer make_mpi_reducer(const dist::Communicator& tp);

}  // namespace echo::backend
