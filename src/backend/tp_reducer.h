// The max / sum reductions of the vocab-parallel cross-entropy (and of the INT8 linear's
// scales) over the tensor-parallel group, on host doubles, in place. Every rank calls them in
// the same order with the same lengths (they are collectives).
#pragma once

#include <functional>
#include <span>

namespace echo::dist {
class Communicator;
}

namespace echo::backend {

struct TpReducer {
  std::function<void(std::span<double>)> max;
  std::function<void(std::span<double>)> sum;
  // The identity (one rank): a device backend may then skip the host round trip altogether.
  bool local = false;
};

// The identity reducer, for tp = 1.
TpReducer make_local_reducer();

// MPI_Allreduce of doubles (MPI_MAX / MPI_SUM) on tp.
// NOTE: the reducer keeps tp's MPI_Comm handle, not the Communicator: tp must outlive it.
TpReducer make_mpi_reducer(const dist::Communicator& tp);

}  // namespace echo::backend
