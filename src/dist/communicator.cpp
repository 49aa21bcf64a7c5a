// Communicator lifetime and splitting.
#include "dist/communicator.h"

#include <utility>
#include <vector>

#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::dist {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return std::string(text, static_cast<size_t>(len));
}

Communicator::Communicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  // FNV-1a over the members' world ranks (0 is kept for "none").
  uint64_t h = 1469598103934665603ull;
  for (const int r : world_ranks()) {
    h ^= static_cast<uint32_t>(r);
    h *= 1099511628211ull;
  }
  members_id_ = h == 0 ? 1 : h;
}

Communicator Communicator::borrow(MPI_Comm comm) { return Communicator(comm, false); }
Communicator Communicator::adopt(MPI_Comm comm) { return Communicator(comm, true); }

Communicator Communicator::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &out));
  return adopt(out);
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      owned_(std::exchange(other.owned_, false)),
      rank_(other.rank_),
      size_(other.size_),
      members_id_(other.members_id_) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    this->~Communicator();
    new (this) Communicator(std::move(other));
  }
  return *this;
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

// barrier and all_ranks serve start-up's set-up (workspaces, communicators): slow scopes, as the
// peers may still be busy with their own part of it.
void Communicator::barrier() const {
  const CollectiveScope watched("a barrier of start-up's set-up (MPI_Barrier)", *this, Patience::slow);
  MPI_CHECK(MPI_Barrier(comm_));
}

double Communicator::sum_in_rank_order(double value) const {
  std::vector<double> parts(static_cast<size_t>(size_));
  const CollectiveScope watched("a sum over ranks (the step's loss and norms)", *this);
  MPI_CHECK(MPI_Allgather(&value, 1, MPI_DOUBLE, parts.data(), 1, MPI_DOUBLE, comm_));
  double sum = 0;
  for (double p : parts) sum += p;
  return sum;
}

bool Communicator::all_ranks(bool ok) const {
  int mine = ok ? 1 : 0, all = 0;
  const CollectiveScope watched("an agreement of start-up's set-up (MPI_Allreduce of a yes or no)", *this,
                                Patience::slow);
  MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm_));
  return all != 0;
}

std::vector<int> Communicator::world_ranks() const {
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm_, &mine));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> here(static_cast<size_t>(size_)), there(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) here[static_cast<size_t>(r)] = r;
  MPI_CHECK(MPI_Group_translate_ranks(mine, size_, here.data(), world, there.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return there;
}

}  // namespace echo::dist
