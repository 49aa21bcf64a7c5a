// Replica agreement by hash: one 64-bit FNV-1a per replicated parameter, min and max over TP.
#include "model/replica_check.h"

#include <mpi.h>

#include "core/hash.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::model {

template <class T>
std::vector<std::string> diverged_replicas(const ParameterSet<T>& params, const dist::Communicator& tp) {
  std::vector<size_t> index;
  std::vector<uint64_t> lo, hi;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto shard = params[i].spec->shard;
    if (shard != ShardKind::replicated && shard != ShardKind::replicated_grad_sum) continue;
    index.push_back(i);
    const std::vector<T> value = params[i].value_vector();
    lo.push_back(fnv1a(value.data(), value.size() * sizeof(T)));
  }
  hi = lo;
  const int n = static_cast<int>(lo.size());
  const dist::CollectiveScope watched("the replica check (MPI_Allreduce)", tp);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, lo.data(), n, MPI_UINT64_T, MPI_MIN, tp.get()));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, hi.data(), n, MPI_UINT64_T, MPI_MAX, tp.get()));
  std::vector<std::string> diverged;
  for (size_t j = 0; j < index.size(); ++j)
    if (lo[j] != hi[j]) diverged.push_back(params[index[j]].spec->name);
  return diverged;
}

template std::vector<std::string> diverged_replicas(const ParameterSet<float>&, const dist::Communicator&);
template std::vector<std::string> diverged_replicas(const ParameterSet<double>&, const dist::Communicator&);

}  // namespace echo::model
