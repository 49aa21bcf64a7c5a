// RAII wrapper of an MPI communicator: owns (and frees) communicators it created, borrows
// MPI_COMM_WORLD. Every echo communicator reports errors by return code (MPI_CHECK).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace echo::dist {

class Communicator {
 public:
  Communicator() = default;
  static Communicator borrow(MPI_Comm comm);  // not freed on destruction (e.g. MPI_COMM_WORLD)
  static Communicator adopt(MPI_Comm comm);   // freed on destruction
  Communicator split(int color, int key) const;

  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  void barrier() const;
  // The sum of one double from every rank, added in rank order, so every rank gets the same
  // bits (MPI_Allreduce does not promise that).
  double sum_in_rank_order(double value) const;
  // True on every rank when `ok` is true on every rank: all ranks then take the same branch.
  bool all_ranks(bool ok) const;
  // The rank in MPI_COMM_WORLD of each rank of this communicator, in this one's order.
  std::vector<int> world_ranks() const;
  // A number naming the set of processes (their world ranks, in order): equal on every member,
  // and on two communicators of the same members. 0 for a null communicator.
  uint64_t members_id() const { return members_id_; }

 private:
  Communicator(MPI_Comm comm, bool owned);
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  uint64_t members_id_ = 0;
};

}  // namespace echo::dist
