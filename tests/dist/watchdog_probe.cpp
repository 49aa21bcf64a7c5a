// A program for the watchdog test: with a 1 s collective timeout, rank 1 stops arriving (it
// sleeps 30 s) while rank 0 waits in a watched collective. Rank 0's watchdog must end it with a
// message naming the collective and rank 1 (seen on the node's progress board), and mpirun then
// ends the job: no hang. With the argument
// "agree", rank 0 waits in dist::agree (a slow collective: start-up's and a save's) with a step
// limit of 0.2 s and a slow one of 1.5 s: it must be ended by the slow limit, named in the message.
#include <mpi.h>

#include <chrono>
#include <thread>

#include <string>

#include "dist/agreement.h"
#include "dist/collective_watchdog.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"

int main(int argc, char** argv) {
  return echo::dist::guarded_main(argc, argv, [](int n, char** args) {
    auto world = echo::dist::Communicator::borrow(MPI_COMM_WORLD);
    const bool in_agreement = n > 1 && std::string(args[1]) == "agree";
    echo::dist::set_collective_timeout(in_agreement ? 0.2 : 1.0, world.rank());
    if (in_agreement) echo::dist::set_slow_collective_timeout(1.5);
    echo::dist::watch_peers_on_node();
    if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
    if (in_agreement)
      echo::dist::agree(world, "");
    else
      world.sum_in_rank_order(1.0);
    return 0;
  });
}
