// The parallel layout (docs/design.md §3): world = dp × tp, tp_rank = rank % tp,
// dp_rank = rank / tp, so a TP group is contiguous ranks (one node). World holds the
// TP and DP communicators built from that mapping.
#pragma once

#include "dist/communicator.h"

namespace echo::dist {

struct Layout {
  int world_size = 1;
  int rank = 0;
  int tp = 1;
  int dp = 1;
  int tp_rank = 0;
  int dp_rank = 0;
};

// Throws echo::Error when tp < 1 or tp does not divide world_size.
Layout make_layout(int world_size, int rank, int tp);

struct World {
  Layout layout;
  Communicator world;
  Communicator tp;  // ranks sharing dp_rank, ordered by tp_rank
  Communicator dp;  // ranks sharing tp_rank, ordered by dp_rank

  static World create(int tp, MPI_Comm base = MPI_COMM_WORLD);
};

// Where this rank sits among the ranks of `comm` on its node (the ranks sharing its memory).
struct NodePlace {
  int local_rank = 0;  // which GPU it takes
  int local_size = 1;  // ranks of comm on this node
};
// Collective over comm.
NodePlace node_place(const Communicator& comm);
inline int node_local_rank(const Communicator& comm) { return node_place(comm).local_rank; }

}  // namespace echo::dist
