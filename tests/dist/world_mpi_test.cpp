// The TP and DP communicators built from the layout, checked on 2 and 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "dist/world.h"

namespace echo::dist {

TEST(World, CommunicatorsFollowTheLayout) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int tp : {1, 2, size}) {
    if (size % tp) continue;
    World w = World::create(tp);
    EXPECT_EQ(w.tp.size(), tp);
    EXPECT_EQ(w.dp.size(), size / tp);
    EXPECT_EQ(w.tp.rank(), w.layout.tp_rank);
    EXPECT_EQ(w.dp.rank(), w.layout.dp_rank);
    // The members of my TP group are world ranks dp_rank*tp .. dp_rank*tp + tp - 1, in order.
    std::vector<int> members(tp);
    const int me = w.layout.rank;
    MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, w.tp.get());
    for (int j = 0; j < tp; ++j) EXPECT_EQ(members[j], w.layout.dp_rank * tp + j);
    std::vector<int> dp_members(size / tp);
    MPI_Allgather(&me, 1, MPI_INT, dp_members.data(), 1, MPI_INT, w.dp.get());
    for (int j = 0; j < size / tp; ++j) EXPECT_EQ(dp_members[j], j * tp + w.layout.tp_rank);
  }
}

}  // namespace echo::dist
