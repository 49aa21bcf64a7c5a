// An error agreed over a communicator (see agreement.h).
#include "dist/agreement.h"

#include <fmt/format.h>
#include <mpi.h>

#include "core/error.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::dist {

std::string error_text(const std::exception& e) {
  if (const auto* err = dynamic_cast<const Error*>(&e); err && err->kind() != Error::Kind::internal)
    return err->message();
  return e.what();
}

std::string agree(const dist::Communicator& comm, const std::string& local_error, const char* what) {
  const CollectiveScope watched(what, comm, Patience::slow);
  const int size = comm.size();
  int mine = local_error.empty() ? size : comm.rank();
  int first = size;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm.get()));
  if (first == size) return {};
  std::string msg = comm.rank() == first ? local_error : std::string();
  int len = static_cast<int>(msg.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, comm.get()));
  msg.resize(static_cast<size_t>(len));
  MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, first, comm.get()));
  if (size > 1) msg += fmt::format(" (reported by rank {} of {})", first, size);
  return msg;
}

}  // namespace echo::dist
