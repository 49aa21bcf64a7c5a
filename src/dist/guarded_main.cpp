// guarded_main: exceptions become a logged error plus MPI_Abort (never a hang).
#include "dist/guarded_main.h"

#include <mpi.h>

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/log.h"

namespace echo::dist {

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "echo: MPI_Init_thread failed\n");
    std::exit(1);
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

static int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int guarded_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  MpiSession session(&argc, &argv);
  try {
    // Every program's log lines name their rank (a bench that never called init labelled each
    // rank's lines [rank 0/1]); a program may call init again with another level.
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    log::init(world_rank(), size);
    return body(argc, argv);
  } catch (const std::exception& e) {
    // NOTE: plain stderr, not the logger: the logger may be what failed, and this line must
    // reach the user before MPI_Abort tears the job down.
    std::fprintf(stderr, "[rank %d] error: %s\n", world_rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}

}  // namespace echo::dist
