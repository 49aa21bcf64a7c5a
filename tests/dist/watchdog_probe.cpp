// A program for the watchdog test: with a 1 s collective timeout, rank 1 stops arriving (it
// sleeps 30 s) while rank 0 waits in a watched collective. Rank 0's watchdog must end it with a
// message naming the collective, and mpirun then ends the job: no hang.
#include <mpi.h>

#include <chrono>
#include <thread>

#include "dist/collective_watchdog.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"

int main(int argc, char** argv) {
  return echo::dist::guarded_main(argc, argv, [](int, char**) {
    auto world = echo::dist::Communicator::borrow(MPI_COMM_WORLD);
    echo::dist::set_collective_timeout(1.0, world.rank());
    if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
    world.sum_in_rank_order(1.0);
    return 0;
  });
}
