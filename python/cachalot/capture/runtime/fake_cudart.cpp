// fake_cudart.cpp -- a CPU-only stand-in for libcudart.so.13 (and the slice of
// the CUDA driver API that PyTorch reaches through
// cudaGetDriverEntryPointByVersion), emulating GPU *memory bookkeeping* only.
//
// What it emulates
//   * FAKE_CUDA_DEVICE_COUNT devices (default 1), each with FAKE_CUDA_CAPACITY
//     bytes (default 80 GiB; suffixes K/M/G/T = KiB/MiB/GiB/TiB accepted).
//     All devices share one capacity counter (good enough for 1 device).
//   * cudaMalloc/cudaFree (and cudaMallocAsync/cudaFreeAsync) hand out
//     addresses from a virtual range that is never backed by memory (it is
//     reserved PROT_NONE so host allocations cannot alias it): first-fit over
//     [FAKE_CUDA_VA_BASE (default 0x100000000000), +8*capacity). Requests < 2 MiB are
//     512-byte aligned and rounded to 512 B; requests >= 2 MiB are 2 MiB
//     aligned and rounded to 2 MiB. The rounded size is what counts against
//     capacity. Exceeding capacity -> cudaErrorMemoryAllocation.
//   * cuMemCreate/cuMemRelease/cuMemMap/cuMemUnmap/cuMemAddressReserve/...
//     for expandable segments: physical handles count against the SAME
//     capacity; reservations come from a separate VA range.
//   * streams/events: distinct handles, everything completes immediately.
//   * kernel launches and memcpy/memset: no-ops (D2H copies zero-fill the
//     host buffer). Nothing is computed.
//   * FAKE_CUDA_LOG=<file>: CSV of every device-level memory event (flushed
//     per line unless FAKE_CUDA_LOG_FLUSH=0).
//   * FAKE_CUDA_VERBOSE=1: report calls to unimplemented (stubbed) functions.
//   * FAKE_CUDA_TOTAL=<bytes>: total memory reported to the program (default:
//     the capacity); allocations are still limited by FAKE_CUDA_CAPACITY only.
//   * FAKE_CUDA_RESERVED=<bytes>: bytes pre-used by a pretend CUDA context
//     (reduces free memory reported and usable), default 0.
//
// Everything here is written from the public CUDA headers; no NVIDIA or
// PyTorch code is included.
//
// Provenance: copied from the cachalot team's shared/fakegpu (itself started
// from the oracle's fake runtime) for `cachalot capture`. Changes made here:
// the device profile (compute capability, SM count, L2 size, shared memory)
// comes from FAKE_CUDA_CC / FAKE_CUDA_SMS / FAKE_CUDA_L2 / FAKE_CUDA_SMEM_SM /
// FAKE_CUDA_SMEM_OPTIN so that torch makes the kernel choices of the GPU being
// predicted, FAKE_CUDA_TOTAL sets the memory size the program is told (a
// capture enforces no limit), and fakecuda_set_d2h_callback() lets the capture tell the user
// where device data was read on the host (those reads return zeros).

//
// The library is four files: this one (the exported runtime API),
// cudart_state.cpp (the device state and the allocation core),
// cudart_driver.cpp and cudart_driver_device.cpp (the driver API), sharing
// cudart_internal.h.

#include "cudart_internal.h"

namespace fkrt {
namespace {

const char* rt_error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    default: return "cudaErrorUnknown";
  }
}

const char* rt_error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotSupported: return "operation not supported (fake_cudart)";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    default: return "unknown error";
  }
}


}  // namespace
}  // namespace fkrt

using namespace fkrt;


// ============================================================================
// Exported: fake-specific API
// ============================================================================
extern "C" {

void fakecuda_set_d2h_callback(void (*cb)(uint64_t bytes, void* user), void* user) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  s.d2h_cb = cb;
  s.d2h_user = user;
}

void fakecuda_set_event_callback(fakecuda_event_cb cb, void* user) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  s.cb = cb;
  s.cb_user = user;
}

uint64_t fakecuda_kernel_launches(void);
void fakecuda_get_counters(fakecuda_counters* out) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  if (out) {
    *out = s.c;
    out->n_kernel_launches = fakecuda_kernel_launches();
  }
}

const char* fakecuda_version(void) { return "cachalot capture runtime: fake libcudart.so.13 (from shared/fakegpu v2)"; }

// Used by the fake libcuda.so.1 (build/fake_libcuda.c) to forward exported
// driver symbols to the implementations here, so both share one device state.
void* fakecuda_driver_symbol(const char* name) { return lookup_driver_symbol(name); }

// Called by the generated stubs for every runtime function we do not emulate.
int fakecuda_unimplemented(const char* name) {
  State& s = St();
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.c.n_unimplemented++;
  }
  if (s.verbose) fprintf(stderr, "[fake_cudart] unimplemented: %s -> cudaErrorNotSupported\n", name);
  t_last_error = cudaErrorNotSupported;
  return cudaErrorNotSupported;
}

// ============================================================================
// Exported: CUDA runtime API
// ============================================================================

// ---- errors ----------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t error) { return rt_error_name(error); }
const char* cudaGetErrorString(cudaError_t error) { return rt_error_string(error); }
cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

// ---- versions / devices ------------------------------------------------------
cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return set_err(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return set_err(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_err(cudaErrorInvalidValue);
  *count = St().device_count;
  if (*count == 0) return set_err(cudaErrorNoDevice);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_err(cudaErrorInvalidValue);
  if (St().device_count == 0) return set_err(cudaErrorNoDevice);
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return set_err(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  if (!valid_device(device)) return set_err(cudaErrorInvalidDevice);
  return cudaSuccess;
}
cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return set_err(cudaErrorInvalidValue);
  *flags = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDeviceFlags(unsigned int) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (!canAccessPeer) return set_err(cudaErrorInvalidValue);
  if (!valid_device(device) || !valid_device(peerDevice)) return set_err(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice ? 1 : 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int) {
  if (!valid_device(peerDevice)) return set_err(cudaErrorInvalidDevice);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return set_err(cudaErrorInvalidValue);
  if (!valid_device(device)) return set_err(cudaErrorInvalidDevice);
  // cudaDeviceAttr values equal the corresponding CUdevice_attribute values.
  *value = device_attribute(static_cast<int>(attr));
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (!pciBusId || len <= 0) return set_err(cudaErrorInvalidValue);
  if (!valid_device(device)) return set_err(cudaErrorInvalidDevice);
  snprintf(pciBusId, static_cast<size_t>(len), "00000000:%02X:00.0", 0x18 + device);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return set_err(cudaErrorInvalidValue);
  if (!valid_device(device)) return set_err(cudaErrorInvalidDevice);
  State& s = St();
  memset(prop, 0, sizeof(*prop));
  snprintf(prop->name, sizeof(prop->name), "%s", s.device_name.c_str());
  for (int i = 0; i < 16; ++i) prop->uuid.bytes[i] = static_cast<char>(0xF0 + i + device);
  prop->totalGlobalMem = s.reported_total;
  prop->sharedMemPerBlock = 49152;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = s.cc_major;
  prop->minor = s.cc_minor;
  prop->textureAlignment = 512;
  prop->texturePitchAlignment = 32;
  prop->multiProcessorCount = s.sm_count;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->ECCEnabled = 1;
  prop->pciBusID = 0x18 + device;
  prop->asyncEngineCount = 3;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = s.l2_bytes;
  prop->persistingL2CacheMaxSize = 32505856;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->globalL1CacheSupported = 1;
  prop->localL1CacheSupported = 1;
  prop->sharedMemPerMultiprocessor = s.smem_per_sm;
  prop->regsPerMultiprocessor = 65536;
  prop->managedMemory = 1;
  prop->sharedMemPerBlockOptin = s.smem_optin;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->reservedSharedMemPerBlock = 1024;
  prop->memoryPoolsSupported = 1;
#if CUDART_VERSION >= 13000  // the NUMA fields came with CUDA 13
  prop->hostNumaId = -1;
  prop->deviceNumaId = -1;
#endif
  return cudaSuccess;
}

// ---- memory --------------------------------------------------------------------
cudaError_t cudaMalloc(void** devPtr, size_t size) { return do_malloc(devPtr, size, false); }
cudaError_t cudaFree(void* devPtr) { return do_free(devPtr, false); }
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t) {
  return do_malloc(devPtr, size, true);
}
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t) { return do_free(devPtr, true); }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  if (total) *total = s.reported_total;
  if (free) *free = s.reported_total > s.c.phys_used ? s.reported_total - s.c.phys_used : 0;
  return cudaSuccess;
}

// Page-locked host memory is plain host memory here; its ranges are remembered so that
// cudaPointerGetAttributes says cudaMemoryTypeHost for them, as torch's is_pinned() asks
// (DDP's reducer asserts its staging buffer is pinned).
static std::mutex g_pinned_mu;
static std::map<uintptr_t, size_t> g_pinned;  // start -> size

// By address: GCC 12 takes a const void* to fresh malloc memory for a read of it
// (-Wmaybe-uninitialized).
static void pin(uintptr_t start, size_t size) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  g_pinned[start] = size;
}
static void unpin(const void* p) {
  std::lock_guard<std::mutex> g(g_pinned_mu);
  g_pinned.erase(reinterpret_cast<uintptr_t>(p));
}
static bool is_pinned(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return false;
  --it;
  return a < it->first + std::max<size_t>(it->second, 1);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return set_err(cudaErrorInvalidValue);
  *ptr = size ? malloc(size) : nullptr;
  if (*ptr) pin(reinterpret_cast<uintptr_t>(*ptr), size);
  return (*ptr || !size) ? cudaSuccess : set_err(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  return cudaMallocHost(pHost, size);
}
cudaError_t cudaFreeHost(void* ptr) {
  if (ptr) unpin(ptr);
  free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int) {
  if (ptr) pin(reinterpret_cast<uintptr_t>(ptr), size);
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* ptr) {
  if (ptr) unpin(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int) {
  if (!pDevice) return set_err(cudaErrorInvalidValue);
  *pDevice = pHost;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return set_err(cudaErrorInvalidValue);
  memset(attributes, 0, sizeof(*attributes));
  if (ptr && is_device_ptr(ptr)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (ptr && is_pinned(ptr)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = 0;
    attributes->hostPointer = const_cast<void*>(ptr);
    attributes->devicePointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
  }
  return cudaSuccess;
}

static void fake_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (!count) return;
  bool dst_dev = is_device_ptr(dst), src_dev = is_device_ptr(src);
  if (kind == cudaMemcpyHostToHost || (kind == cudaMemcpyDefault && !dst_dev && !src_dev)) {
    memmove(dst, src, count);
  } else if (!dst_dev && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault)) {
    memset(dst, 0, count);  // device memory is not backed: reads give zeros,
    shadow_d2h(dst, src, count);  // but for the bytes the program copied there itself
    State& s = St();
    void (*cb)(uint64_t, void*) = nullptr;
    void* user = nullptr;
    {
      std::lock_guard<std::mutex> g(s.mu);
      s.c.n_d2h++;
      s.c.d2h_bytes += count;
      cb = s.d2h_cb;
      user = s.d2h_user;
    }
    if (cb) cb(count, user);  // outside the lock: the callback may call back into the runtime
  } else if (dst_dev && !src_dev && (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDefault)) {
    shadow_h2d(dst, src, count);
    State& s = St();
    std::lock_guard<std::mutex> g(s.mu);
    s.c.n_h2d++;
    s.c.h2d_bytes += count;
  } else if (dst_dev && src_dev) {
    shadow_d2d(dst, src, count);
  }
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  fake_copy(dst, src, count, kind);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t) {
  fake_copy(dst, src, count, kind);
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void*, int, const void*, int, size_t, cudaStream_t) {
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeer(void*, int, const void*, int, size_t) { return cudaSuccess; }
cudaError_t cudaMemcpy2DAsync(void*, size_t, const void*, size_t, size_t, size_t,
                              enum cudaMemcpyKind, cudaStream_t) {
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int, size_t n) {
  shadow_drop(p, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int, size_t n, cudaStream_t) {
  shadow_drop(p, n);
  return cudaSuccess;
}

// ---- IPC -----------------------------------------------------------------------
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  if (!handle) return set_err(cudaErrorInvalidValue);
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->reserved, &devPtr, sizeof(devPtr));
  return cudaSuccess;
}
cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) {
  return set_err(cudaErrorNotSupported);
}
cudaError_t cudaIpcCloseMemHandle(void*) { return cudaSuccess; }

// ---- memory pools (cudaMallocAsync backend) -------------------------------------
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  if (!memPool) return set_err(cudaErrorInvalidValue);
  if (!valid_device(device) || device >= 64) return set_err(cudaErrorInvalidDevice);
  g_default_pools[device].device = device;
  *memPool = reinterpret_cast<cudaMemPool_t>(&g_default_pools[device]);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  return cudaDeviceGetDefaultMemPool(memPool, device);
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, enum cudaMemPoolAttr attr, void* value) {
  if (!value) return set_err(cudaErrorInvalidValue);
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
      *static_cast<uint64_t*>(value) = s.async_used;
      break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      *static_cast<uint64_t*>(value) = s.async_peak;
      break;
    case cudaMemPoolAttrReleaseThreshold:
      *static_cast<uint64_t*>(value) = 0;
      break;
    default:
      *static_cast<int*>(value) = 0;
      break;
  }
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr attr, void* value) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  if ((attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh) && value)
    s.async_peak = s.async_used;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAccess(cudaMemPool_t, const struct cudaMemAccessDesc*, size_t) {
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return cudaSuccess; }
cudaError_t cudaDeviceGetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void* value) {
  if (value) *static_cast<uint64_t*>(value) = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceSetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void*) {
  return cudaSuccess;
}

// ---- streams ---------------------------------------------------------------------
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (!pStream) return set_err(cudaErrorInvalidValue);
  auto* fs = new FakeStream{t_device, priority, flags, g_stream_ids++};
  *pStream = reinterpret_cast<cudaStream_t>(fs);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithPriority(pStream, 0, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  // Streams are intentionally leaked: c10 never destroys pool streams and a
  // stale handle must never alias a new stream in the allocator's maps.
  (void)stream;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  if (!priority) return set_err(cudaErrorInvalidValue);
  *priority = hStream ? reinterpret_cast<FakeStream*>(hStream)->priority : 0;
  return cudaSuccess;
}
cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  if (!flags) return set_err(cudaErrorInvalidValue);
  *flags = hStream ? reinterpret_cast<FakeStream*>(hStream)->flags : 0;
  return cudaSuccess;
}
cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  if (!streamId) return set_err(cudaErrorInvalidValue);
  *streamId = hStream ? reinterpret_cast<FakeStream*>(hStream)->id : 0;
  return cudaSuccess;
}
cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  if (!device) return set_err(cudaErrorInvalidValue);
  *device = hStream ? reinterpret_cast<FakeStream*>(hStream)->device : t_device;
  return cudaSuccess;
}
// Capture state is cudart_graphs.cpp's.
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  if (!pCaptureStatus) return set_err(cudaErrorInvalidValue);
  *pCaptureStatus = capture_status(stream, nullptr, nullptr);
  return cudaSuccess;
}
static cudaError_t capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                unsigned long long* id_out, cudaGraph_t* graph_out,
                                const cudaGraphNode_t** dependencies_out, size_t* numDependencies_out) {
  cudaStreamCaptureStatus st = capture_status(stream, id_out, graph_out);
  if (captureStatus_out) *captureStatus_out = st;
  if (dependencies_out) *dependencies_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  return cudaSuccess;
}
#if CUDART_VERSION >= 13000
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  if (edgeData_out) *edgeData_out = nullptr;
  return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}
#else
// CUDA 12: the header maps the name to cudaStreamGetCaptureInfo_v2 (what torch imports), which
// has no edge data; _v3 (CUDA 12.3 on) is the form with it.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     size_t* numDependencies_out) {
  return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}
#if CUDART_VERSION >= 12030
cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t stream,
                                        enum cudaStreamCaptureStatus* captureStatus_out,
                                        unsigned long long* id_out, cudaGraph_t* graph_out,
                                        const cudaGraphNode_t** dependencies_out,
                                        const cudaGraphEdgeData** edgeData_out,
                                        size_t* numDependencies_out) {
  if (edgeData_out) *edgeData_out = nullptr;
  return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                      numDependencies_out);
}
#endif
#endif
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (!mode) return set_err(cudaErrorInvalidValue);
  cudaStreamCaptureMode old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}
#if CUDART_VERSION >= 13000
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*,
                                         size_t* pNumDependencies) {
#else  // CUDA 12: no edge data (that is cudaGraphNodeGetDependencies_v2)
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t*, size_t* pNumDependencies) {
#endif
  if (pNumDependencies) *pNumDependencies = 0;
  return cudaSuccess;
}

// ---- events -----------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return set_err(cudaErrorInvalidValue);
  auto* e = new FakeEvent{flags};
  event_born(e);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event_dies(event)) return set_err(cudaErrorInvalidResourceHandle);  // twice, or not one
  clock_event_forget(event);  // cudart_modules.cpp's clock
  delete reinterpret_cast<FakeEvent*>(event);
  return cudaSuccess;
}
// Events take their times from cudart_modules.cpp's deterministic clock.
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (event_live(e)) clock_event_record(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t, unsigned int) {
  if (event_live(e)) clock_event_record(e);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return set_err(cudaErrorInvalidValue);
  if (!clock_elapsed_ms(start, end, ms)) *ms = 0.0f;
  return cudaSuccess;
}

// ---- driver entry points -----------------------------------------------------------
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long,
                                             enum cudaDriverEntryPointQueryResult* driverStatus) {
  (void)cudaVersion;
  if (!symbol || !funcPtr) return set_err(cudaErrorInvalidValue);
  void* fn = lookup_driver_symbol(symbol);
  *funcPtr = fn;
  if (driverStatus)
    *driverStatus = fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  if (!fn && St().verbose)
    fprintf(stderr, "[fake_cudart] driver symbol not emulated: %s\n", symbol);
  return cudaSuccess;
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

// ---- kernels: registration and launches are accepted and do nothing ----------------
static void* g_fatbin_handle_storage[4];
void** __cudaRegisterFatBinary(void*) { return g_fatbin_handle_storage; }
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*,
                            dim3*, int*) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterHostVar(void**, const char*, char*, size_t) {}
char __cudaInitModule(void**) { return 0; }
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, void*) { return 0; }
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  if (gridDim) *gridDim = dim3(1, 1, 1);
  if (blockDim) *blockDim = dim3(1, 1, 1);
  if (sharedMem) *sharedMem = 0;
  if (stream) *static_cast<void**>(stream) = nullptr;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  if (kernelPtr) *kernelPtr = reinterpret_cast<cudaKernel_t>(const_cast<void*>(entryFuncAddr));
  return cudaSuccess;
}
static std::atomic<uint64_t> g_launches{0};
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t stream) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  capture_kernel(stream);  // a node of the graph the stream captures, if any
  return cudaSuccess;
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t stream) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  capture_kernel(stream);
  return cudaSuccess;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void*, void**) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (config) capture_kernel(config->stream);
  return cudaSuccess;
}
uint64_t fakecuda_kernel_launches(void) { return g_launches.load(); }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void*) {
  if (!attr) return set_err(cudaErrorInvalidValue);
  memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void*, int,
                                                          size_t) {
  if (numBlocks) *numBlocks = 1;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void*,
                                                                   int, size_t, unsigned int) {
  if (numBlocks) *numBlocks = 1;
  return cudaSuccess;
}

}  // extern "C"

// Flush the log at exit.
namespace {
struct LogFlusher {
  ~LogFlusher() {
    State& s = S();
    if (s.log) fflush(s.log);
  }
} g_log_flusher;
}  // namespace
