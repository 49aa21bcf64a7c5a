// TP reducers: identity, or MPI_Allreduce on the group's communicator.
#include "backend/tp_reducer.h"

#include <climits>

#include "core/error.h"
#include "dist/collective_watchdog.h"
#include "dist/communicator.h"
#include "dist/mpi_check.h"

namespace echo::backend {

TpReducer make_local_reducer() {
  return {[](std::span<double>) {}, [](std::span<double>) {}, /*local=*/true};
}

TpReducer make_mpi_reducer(const dist::Communicator& tp) {
  const MPI_Comm comm = tp.get();
  const uint64_t members = tp.members_id();
  ECHO_CHECK(comm != MPI_COMM_NULL, "make_mpi_reducer: null communicator");
  auto all_reduce = [comm, members](std::span<double> values, MPI_Op op) {
    ECHO_CHECK(values.size() <= static_cast<size_t>(INT_MAX), "TpReducer: {} values exceed one MPI call",
               values.size());
    const dist::CollectiveScope watched("a tensor-parallel reduction of statistics (MPI_Allreduce)", members);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, op, comm));
  };
  return {[all_reduce](std::span<double> values) { all_reduce(values, MPI_MAX); },
          [all_reduce](std::span<double> values) { all_reduce(values, MPI_SUM); }};
}

}  // namespace echo::backend
