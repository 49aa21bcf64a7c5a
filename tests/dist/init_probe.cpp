// A program for the MPI_Init watchdog test: rank 1 (by Open MPI's launch environment) waits 30 s
// before it calls MPI_Init, as a rank stopped while it starts; rank 0, waiting inside MPI_Init
// for it, must end the job after ECHO_MPI_INIT_TIMEOUT_S with a message instead of hanging.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist/guarded_main.h"

int main(int argc, char** argv) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank != nullptr && std::string(rank) == "1") std::this_thread::sleep_for(std::chrono::seconds(30));
  return echo::dist::guarded_main(argc, argv, [](int, char**) { return 0; });
}
