// CUBLAS_CHECK: the cuBLAS / cuBLASLt member of the ECHO_CHECK family (like CUDA_CHECK in
// cuda_check.h). A failed call throws echo::Error carrying the file, the line, the call and the
// library's own status name and text, e.g. "cuBLAS error CUBLAS_STATUS_NOT_SUPPORTED: ...".
#pragma once

#include <cublasLt.h>

#include "core/error.h"

#define CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                     \
    const cublasStatus_t echo_cublas_status_ = (call);                                                     \
    if (echo_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      ::echo::throw_error(__FILE__, __LINE__, #call,                                                       \
                          ::fmt::format("cuBLAS error {}: {}", cublasLtGetStatusName(echo_cublas_status_), \
                                        cublasLtGetStatusString(echo_cublas_status_)));                    \
    }                                                                                                      \
  } while (0)
