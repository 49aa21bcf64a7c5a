// Helpers for the multi-rank model tests: a parameter's full gradient assembled from the TP
// shards, and the relative distance of two tensors.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dist/communicator.h"
#include "model/parameters.h"

namespace echo::model::testing {

// The full gradient of `p`, gathered from the TP group: column/vocab shards are row blocks in
// rank order, row shards column blocks; replicated parameters are this rank's copy.
inline std::vector<float> gather_grad(const Parameter<float>& p, const dist::Communicator& tp) {
  const size_t local = static_cast<size_t>(p.numel());
  std::vector<float> all(local * tp.size());
  MPI_Allgather(p.host_grad().data(), static_cast<int>(local), MPI_FLOAT, all.data(), static_cast<int>(local), MPI_FLOAT,
                tp.get());
  if (p.spec->shard == ShardKind::column || p.spec->shard == ShardKind::vocab) return all;
  if (p.spec->shard != ShardKind::row) return p.grad_vector();
  const int64_t rows = p.shape[0], cols = p.shape[1];
  std::vector<float> full(all.size());
  for (int r = 0; r < tp.size(); ++r)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) full[i * cols * tp.size() + r * cols + j] = all[r * local + i * cols + j];
  return full;
}

// ‖a - b‖ / ‖b‖ in double.
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

}  // namespace echo::model::testing
