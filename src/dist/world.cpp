// world -> (dp, tp) mapping and the communicators that follow from it.
#include "dist/world.h"

#include "core/error.h"
#include "dist/mpi_check.h"

namespace echo::dist {

Layout make_layout(int world_size, int rank, int tp) {
  ECHO_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
  ECHO_CHECK(rank >= 0 && rank < world_size, "rank {} outside world of size {}", rank, world_size);
  ECHO_CHECK(tp >= 1, "'parallel.tp' = {} must be >= 1", tp);
  ECHO_CHECK(world_size % tp == 0,
             "'parallel.tp' = {} does not divide the number of MPI ranks {} (launch with a multiple of tp ranks)", tp,
             world_size);
  Layout l;
  l.world_size = world_size;
  l.rank = rank;
  l.tp = tp;
  l.dp = world_size / tp;
  l.tp_rank = rank % tp;
  l.dp_rank = rank / tp;
  return l;
}

World World::create(int tp, MPI_Comm base) {
  World w;
  w.world = Communicator::borrow(base);
  w.layout = make_layout(w.world.size(), w.world.rank(), tp);
  w.tp = w.world.split(w.layout.dp_rank, w.layout.tp_rank);
  w.dp = w.world.split(w.layout.tp_rank, w.layout.dp_rank);
  return w;
}

NodePlace node_place(const Communicator& comm) {
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &local));
  NodePlace place;
  MPI_CHECK(MPI_Comm_rank(local, &place.local_rank));
  MPI_CHECK(MPI_Comm_size(local, &place.local_size));
  MPI_CHECK(MPI_Comm_free(&local));
  return place;
}

}  // namespace echo::dist
