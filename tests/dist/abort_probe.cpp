// A program for the abort test: rank 1 throws while every other rank waits in a barrier.
// guarded_main must log the error on rank 1 and end the whole job (no hang).
#include <mpi.h>

#include "core/error.h"
#include "dist/guarded_main.h"

int main(int argc, char** argv) {
  return echo::dist::guarded_main(argc, argv, [](int, char**) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) ECHO_FAIL("deliberate failure on rank {}", rank);
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
  });
}
