// GoogleTest main for multi-rank tests: MPI is initialised once around the whole run, and
// only rank 0 prints the per-test lines so ctest output stays readable. A failure on any rank
// fails the process with a non-zero exit.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local_failed) fprintf(stderr, "[rank %d] tests FAILED on this rank\n", rank);
  MPI_Finalize();
  return any_failed;
}
