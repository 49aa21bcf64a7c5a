// This process's place in MPI_COMM_WORLD, and sub-groups of it, for multi-rank tests.
#pragma once

#include <mpi.h>

#include <cstring>
#include <vector>

#include "dist/communicator.h"

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

// Group sizes for tests over sub-groups: 2, and also 3 and 4 where the world has 4 ranks.
inline std::vector<int> small_group_sizes() {
  std::vector<int> sizes = {2};
  if (world_size() >= 4) sizes.insert(sizes.end(), {3, 4});
  return sizes;
}

// Runs body(group) on a new communicator of the first `size` world ranks; the others wait.
template <class F>
void on_group(int size, F body) {
  auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  const bool member = world.rank() < size;
  auto group = world.split(member ? 0 : 1, world.rank());
  if (member) body(group);
  world.barrier();
}

// Every rank's output gathered and compared bit for bit with rank 0's.
inline bool identical_on_all_ranks(const std::vector<float>& y, const dist::Communicator& comm) {
  std::vector<float> all(y.size() * comm.size());
  MPI_Allgather(y.data(), static_cast<int>(y.size()), MPI_FLOAT, all.data(), static_cast<int>(y.size()), MPI_FLOAT,
                comm.get());
  for (int r = 1; r < comm.size(); ++r)
    if (std::memcmp(all.data(), all.data() + r * y.size(), y.size() * sizeof(float)) != 0) return false;
  return true;
}

}  // namespace echo::testing
