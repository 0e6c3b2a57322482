// cublas_status.h -- the names of cuBLAS status codes, shared by the fake
// libcublas (cublasGetStatusName) and libcublasLt (cublasLtGetStatusName).
// Header-only, with internal linkage: each library gets its own copy.
#pragma once
// CUDA 12's cublas_api.h wants its includer (cublas_v2.h, cublasLt.h) to say how functions are
// declared; a host compiler's answer is "plainly". CUDA 13's header says so itself.
#ifndef CUBLASAPI
#define CUBLASAPI
#endif
#include <cublas_api.h>
#include <cuda_runtime_api.h>  // CUDART_VERSION (getCudartVersion)

// The emulation strategies and descriptors of cuBLAS 13 (which its libraries define by hand;
// on older cuBLAS they fall to the generated stubs).
#define FK_CUBLAS_EMULATION (CUBLAS_VER_MAJOR >= 13)

namespace {

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

}  // namespace
