// The entry every echo program runs through: MPI is initialised, the body runs, and an
// exception on any rank is logged on that rank and ends the whole job with MPI_Abort, so no
// other rank is left waiting in a collective.
#pragma once

#include <functional>

namespace echo::dist {

// Owns MPI_Init_thread / MPI_Finalize.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// Runs body() inside an MpiSession; returns its exit code, or aborts the job on an exception.
int guarded_main(int argc, char** argv, const std::function<int(int argc, char** argv)>& body);

}  // namespace echo::dist
