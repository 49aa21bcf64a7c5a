// MPI_CHECK: turns a failed MPI call into an echo::Error naming the call and MPI's own text.
// Communicators created by echo use MPI_ERRORS_RETURN so the check sees the code.
#pragma once

#include <mpi.h>

#include "core/error.h"

namespace echo::dist {
std::string mpi_error_string(int code);
}

#define MPI_CHECK(call)                                                                              \
  do {                                                                                               \
    const int echo_mpi_rc_ = (call);                                                                 \
    if (echo_mpi_rc_ != MPI_SUCCESS)                                                                 \
      ::echo::throw_error(__FILE__, __LINE__, #call,                                                 \
                          ::fmt::format("MPI call failed: {}", ::echo::dist::mpi_error_string(echo_mpi_rc_))); \
  } while (0)
