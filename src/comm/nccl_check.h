// NCCL_CHECK: an NCCL call whose failure is an echo::Error naming the call and NCCL's reason.
// Built only with NCCL (ECHO_NCCL).
#pragma once

#include <nccl.h>

#include "core/error.h"

#define NCCL_CHECK(call)                                                                           \
  do {                                                                                             \
    const ncclResult_t echo_nccl_status_ = (call);                                                 \
    if (echo_nccl_status_ != ncclSuccess)                                                          \
      ::echo::throw_error(__FILE__, __LINE__, #call,                                               \
                          ::fmt::format("NCCL error: {}", ncclGetErrorString(echo_nccl_status_))); \
  } while (0)
