// cudnn_internal.h -- what the two parts of the fake libcudnn.so.9 share:
// fake_cudnn.cpp (the legacy API: handles, descriptors, convolution, batch
// norm, CTC) and cudnn_backend.cpp (the backend graph API that cudnn_frontend
// drives). Everything here is in namespace fkdnn and stays local to the library
// (its version script exports only cudnn*).
#pragma once
#define FK_LIB "cudnn"
#include "fk_common.h"

#include <cudnn.h>

// The engine config's workspace and shared-memory attributes and the kernel-cache and
// device-property descriptors: in cuDNN 9.10 (torch 2.9), not in 9.1 (torch 2.4); against older
// headers their queries take the generic path.
#define FK_CUDNN_9_10 (CUDNN_VERSION >= 91000)

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>

namespace fkdnn {

// A byte count from the environment (suffixes k/m/g), `dflt` if unset.
uint64_t env_u64(const char* name, uint64_t dflt);
// The workspace policy (see fake_cudnn.cpp): FAKE_CUDNN_WORKSPACE,
// FAKE_CUDNN_BN_WORKSPACE, FAKE_CUDNN_BN_RESERVE; FAKE_CUDNN_ENGINES.
uint64_t ws_conv();
uint64_t ws_bn();
uint64_t rs_bn();
int64_t n_engines();

extern thread_local std::string t_last_error;

constexpr uint32_t kHandleMagic = 0xC0DD1E;
struct Handle {
  uint32_t magic = kHandleMagic;
  cudaStream_t stream = nullptr;
};
inline Handle* H(cudnnHandle_t h) {
  Handle* p = reinterpret_cast<Handle*>(h);
  return (p && p->magic == kHandleMagic) ? p : nullptr;
}

}  // namespace fkdnn
