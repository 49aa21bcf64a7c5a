// This process's place in MPI_COMM_WORLD, for multi-rank tests.
#pragma once

#include <mpi.h>

namespace echo::testing {

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace echo::testing
