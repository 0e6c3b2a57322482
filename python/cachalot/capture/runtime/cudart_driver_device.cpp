// cudart_driver_device.cpp -- the driver API a CUDA device of its own needs (contexts,
// cuMemAlloc/cuMemFree, copies, streams, events, the default stream-ordered memory pool),
// beyond the slice torch reaches (cudart_driver.cpp). cachalot's CUDA device (crates/cuda)
// calls these when PyTorch runs with cachalot.torch.use(device="cuda") on the simulated GPU.
//
// Every call works on the runtime's own state: cuMemAlloc is cudaMalloc's allocation core,
// a CUstream is a cudaStream_t, a CUevent a cudaEvent_t, the default pool the runtime's, so
// torch and cachalot see one device. Misuse gets the code the real driver returns
// (CUDA_ERROR_INVALID_VALUE for a range no allocation covers, CUDA_ERROR_INVALID_CONTEXT for
// a pop with nothing pushed, CUDA_ERROR_INVALID_HANDLE for an event destroyed twice), never a
// crash. A failed driver call leaves the runtime's last error (cudaGetLastError) untouched,
// as on a real GPU, where the two APIs keep separate error state.
//
// The driver's copies keep what they write, by 4 KiB page (cuMemcpyHtoD and cuMemsetD8 store,
// cuMemcpyDtoH reads back, also stream-ordered; a page never written reads as zeros), so that a program checking its data, as
// crates/cuda's tests do, runs here as on a GPU. Only the driver API's copies: the runtime's
// (torch's) keep nothing, and kernels compute nothing.
#include <algorithm>
#include <memory>
#include <vector>

#include "cudart_internal.h"

namespace fkrt {
namespace {

CUresult to_cu(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// Runs a runtime call for the driver: its result as a CUresult, the runtime's last error as
// it was before.
template <class F>
CUresult via_runtime(F f) {
  cudaError_t before = t_last_error;
  cudaError_t e = f();
  t_last_error = before;
  return to_cu(e);
}

// --- contexts: one primary context per device, a stack of current ones per thread ----------
struct PrimaryCtx {
  int device;
  std::atomic<int> retained{0};
};
PrimaryCtx g_primary[64];
thread_local std::vector<CUcontext> t_ctx_stack;

PrimaryCtx* as_primary(CUcontext c) {
  auto* p = reinterpret_cast<PrimaryCtx*>(c);
  return p >= g_primary && p < g_primary + 64 ? p : nullptr;
}

CUcontext primary_of(int device) {
  g_primary[device].device = device;
  return reinterpret_cast<CUcontext>(&g_primary[device]);
}

bool valid(int device) { return valid_device(device) && device < 64; }

// Is [p, p + n) device memory: inside one cudaMalloc/cuMemAlloc allocation, or covered by
// consecutive cuMemMap mappings?
bool covered(uint64_t p, uint64_t n) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  for (const auto& kv : s.allocs)
    if (p >= kv.first && p + n <= kv.first + kv.second.size) return true;
  auto it = s.mappings.upper_bound(p);
  if (it == s.mappings.begin()) return false;
  --it;
  uint64_t at = p, end = p + n;
  while (it != s.mappings.end() && it->first <= at && at < it->first + it->second.size) {
    at = it->first + it->second.size;
    if (at >= end) return true;
    ++it;
  }
  return false;
}

constexpr uint64_t kPage = 4096;
std::mutex g_pages_mu;
std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> g_pages;  // page address -> bytes

// Copies `n` bytes into the pages from device address `dst` on (store), or out of them (load).
void store(uint64_t dst, const void* src, size_t n) {
  std::lock_guard<std::mutex> g(g_pages_mu);
  const auto* from = static_cast<const uint8_t*>(src);
  for (uint64_t at = dst, end = dst + n; at < end;) {
    uint64_t page = at & ~(kPage - 1), len = std::min(end, page + kPage) - at;
    auto& bytes = g_pages[page];
    if (!bytes) bytes.reset(new uint8_t[kPage]());
    memcpy(bytes.get() + (at - page), from, len);
    from += len;
    at += len;
  }
}

void fill(uint64_t dst, uint8_t value, size_t n) {
  std::lock_guard<std::mutex> g(g_pages_mu);
  for (uint64_t at = dst, end = dst + n; at < end;) {
    uint64_t page = at & ~(kPage - 1), len = std::min(end, page + kPage) - at;
    auto& bytes = g_pages[page];
    if (!bytes) bytes.reset(new uint8_t[kPage]());
    memset(bytes.get() + (at - page), value, len);
    at += len;
  }
}

void load(void* dst, uint64_t src, size_t n) {
  std::lock_guard<std::mutex> g(g_pages_mu);
  auto* to = static_cast<uint8_t*>(dst);
  for (uint64_t at = src, end = src + n; at < end;) {
    uint64_t page = at & ~(kPage - 1), len = std::min(end, page + kPage) - at;
    auto it = g_pages.find(page);
    if (it == g_pages.end()) memset(to, 0, len);
    else memcpy(to, it->second.get() + (at - page), len);
    to += len;
    at += len;
  }
}

bool valid_pool(CUmemoryPool pool) {
  auto* p = reinterpret_cast<FakeMemPool*>(pool);
  return p >= g_default_pools && p < g_default_pools + 64 && valid(int(p - g_default_pools));
}

}  // namespace

CUresult fk_cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  // The runtime makes its device's primary context current on first use, as cudart does.
  *pctx = t_ctx_stack.empty() ? primary_of(t_device) : t_ctx_stack.back();
  return CUDA_SUCCESS;
}

CUresult fk_cuCtxSetCurrent(CUcontext ctx) {
  if (ctx && !as_primary(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_stack.empty()) {
    if (ctx) t_ctx_stack.push_back(ctx);
  } else if (ctx) {
    t_ctx_stack.back() = ctx;
  } else {
    t_ctx_stack.pop_back();
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuCtxPushCurrent(CUcontext ctx) {
  if (!as_primary(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult fk_cuCtxPopCurrent(CUcontext* pctx) {
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult fk_cuCtxSynchronize(void) { return CUDA_SUCCESS; }

CUresult fk_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags) *flags = 0;
  if (active) *active = 1;  // the runtime has made it (torch initialises it first)
  return CUDA_SUCCESS;
}

CUresult fk_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = primary_of(dev);
  g_primary[dev].retained++;
  return CUDA_SUCCESS;
}

CUresult fk_cuDevicePrimaryCtxRelease(CUdevice dev) {
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int n = g_primary[dev].retained.load();
  while (n > 0 && !g_primary[dev].retained.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult fk_cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, size_t(len), "%s", St().device_name.c_str());
  return CUDA_SUCCESS;
}

// --- memory ----------------------------------------------------------------------------------
namespace {
// A size larger than the device is out of memory, as on a GPU, logged as the allocation core
// logs a failure; said here because the core's rounding up to 2 MiB would wrap past 2^64 for
// the largest sizes and "succeed".
bool never_fits(uint64_t size, bool async) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  if (size <= s.capacity && size <= UINT64_MAX - kLargeAlign) return false;
  s.c.n_malloc_fail++;
  emit(s, async ? "cudaMallocAsync" : "cudaMalloc", size, 0, 0, cudaErrorMemoryAllocation);
  return true;
}
}  // namespace

CUresult fk_cuMemAlloc(CUdeviceptr* dptr, size_t size) {
  if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (never_fits(size, false)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = nullptr;
  CUresult r = via_runtime([&] { return do_malloc(&p, size, false); });
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

CUresult fk_cuMemFree(CUdeviceptr dptr) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  return via_runtime([&] { return do_free(reinterpret_cast<void*>(dptr), false); });
}

CUresult fk_cuMemGetInfo(size_t* free, size_t* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  return via_runtime([&] { return cudaMemGetInfo(free, total); });
}

CUresult fk_cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !covered(src, n)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = via_runtime(
      [&] { return cudaMemcpy(dst, reinterpret_cast<void*>(src), n, cudaMemcpyDeviceToHost); });
  if (r == CUDA_SUCCESS) load(dst, src, n);  // the runtime counted the copy and wrote zeros
  return r;
}

CUresult fk_cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !covered(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = via_runtime(
      [&] { return cudaMemcpy(reinterpret_cast<void*>(dst), src, n, cudaMemcpyHostToDevice); });
  if (r == CUDA_SUCCESS) store(dst, src, n);
  return r;
}

// Work completes at once, so the stream-ordered copies and memsets are the synchronous ones.
CUresult fk_cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream) {
  return fk_cuMemcpyDtoH(dst, src, n);
}

CUresult fk_cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream) {
  return fk_cuMemcpyHtoD(dst, src, n);
}

CUresult fk_cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (!covered(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  fill(dst, value, n);
  return CUDA_SUCCESS;
}

CUresult fk_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream) {
  return fk_cuMemsetD8(dst, value, n);
}

// --- the default stream-ordered pool -----------------------------------------------------------
CUresult fk_cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return via_runtime(
      [&] { return cudaDeviceGetDefaultMemPool(reinterpret_cast<cudaMemPool_t*>(pool), dev); });
}

CUresult fk_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                    CUstream) {
  if (!dptr || size == 0 || !valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
  if (never_fits(size, true)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = nullptr;
  CUresult r = via_runtime([&] { return do_malloc(&p, size, true); });
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

CUresult fk_cuMemFreeAsync(CUdeviceptr dptr, CUstream) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  return via_runtime([&] { return do_free(reinterpret_cast<void*>(dptr), true); });
}

CUresult fk_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!valid_pool(pool) || !value || attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
      attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    return CUDA_ERROR_INVALID_VALUE;
  // CUmemPool_attribute and cudaMemPoolAttr share their numbers.
  return via_runtime([&] {
    return cudaMemPoolGetAttribute(reinterpret_cast<cudaMemPool_t>(pool),
                                   static_cast<cudaMemPoolAttr>(attr), value);
  });
}

CUresult fk_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!valid_pool(pool) || !value || attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
      attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    return CUDA_ERROR_INVALID_VALUE;  // read-only
  if ((attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) &&
      *static_cast<cuuint64_t*>(value) != 0)
    return CUDA_ERROR_INVALID_VALUE;  // a high-water mark can only be reset to 0
  return via_runtime([&] {
    return cudaMemPoolSetAttribute(reinterpret_cast<cudaMemPool_t>(pool),
                                   static_cast<cudaMemPoolAttr>(attr), value);
  });
}

CUresult fk_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (!valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
  return via_runtime(
      [&] { return cudaMemPoolTrimTo(reinterpret_cast<cudaMemPool_t>(pool), keep); });
}

// --- streams and events: the runtime's own ------------------------------------------------
CUresult fk_cuStreamCreate(CUstream* ph, unsigned int flags) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  return via_runtime(
      [&] { return cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(ph), flags); });
}

CUresult fk_cuStreamDestroy(CUstream s) {
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  return via_runtime([&] { return cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s)); });
}

CUresult fk_cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

CUresult fk_cuStreamWaitEvent(CUstream, CUevent e, unsigned int) {
  return event_live(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult fk_cuEventCreate(CUevent* ph, unsigned int flags) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  return via_runtime(
      [&] { return cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(ph), flags); });
}

CUresult fk_cuEventDestroy(CUevent e) {
  return via_runtime([&] { return cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e)); });
}

CUresult fk_cuEventRecord(CUevent e, CUstream) {
  return event_live(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult fk_cuEventQuery(CUevent e) {
  return event_live(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;  // work completes at once
}

CUresult fk_cuEventSynchronize(CUevent e) {
  return event_live(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

namespace {
struct DeviceSym {
  const char* name;
  void* fn;
};

#define FK(name, fn) {name, reinterpret_cast<void*>(&fk_##fn)}
const DeviceSym kDeviceSyms[] = {
    FK("cuCtxGetCurrent", cuCtxGetCurrent),
    FK("cuCtxSetCurrent", cuCtxSetCurrent),
    FK("cuCtxPushCurrent", cuCtxPushCurrent),
    FK("cuCtxPushCurrent_v2", cuCtxPushCurrent),
    FK("cuCtxPopCurrent", cuCtxPopCurrent),
    FK("cuCtxPopCurrent_v2", cuCtxPopCurrent),
    FK("cuCtxSynchronize", cuCtxSynchronize),
    FK("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState),
    FK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
    FK("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease),
    FK("cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease),
    FK("cuDeviceGetName", cuDeviceGetName),
    FK("cuMemAlloc", cuMemAlloc),
    FK("cuMemAlloc_v2", cuMemAlloc),
    FK("cuMemFree", cuMemFree),
    FK("cuMemFree_v2", cuMemFree),
    FK("cuMemGetInfo", cuMemGetInfo),
    FK("cuMemGetInfo_v2", cuMemGetInfo),
    FK("cuMemcpyDtoH", cuMemcpyDtoH),
    FK("cuMemcpyDtoH_v2", cuMemcpyDtoH),
    FK("cuMemcpyHtoD", cuMemcpyHtoD),
    FK("cuMemcpyHtoD_v2", cuMemcpyHtoD),
    FK("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync),
    FK("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync),
    FK("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync),
    FK("cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync),
    FK("cuMemsetD8", cuMemsetD8),
    FK("cuMemsetD8_v2", cuMemsetD8),
    FK("cuMemsetD8Async", cuMemsetD8Async),
    FK("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool),
    FK("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync),
    FK("cuMemFreeAsync", cuMemFreeAsync),
    FK("cuMemPoolGetAttribute", cuMemPoolGetAttribute),
    FK("cuMemPoolSetAttribute", cuMemPoolSetAttribute),
    FK("cuMemPoolTrimTo", cuMemPoolTrimTo),
    FK("cuStreamCreate", cuStreamCreate),
    FK("cuStreamDestroy", cuStreamDestroy),
    FK("cuStreamDestroy_v2", cuStreamDestroy),
    FK("cuStreamSynchronize", cuStreamSynchronize),
    FK("cuStreamWaitEvent", cuStreamWaitEvent),
    FK("cuEventCreate", cuEventCreate),
    FK("cuEventDestroy", cuEventDestroy),
    FK("cuEventDestroy_v2", cuEventDestroy),
    FK("cuEventRecord", cuEventRecord),
    FK("cuEventQuery", cuEventQuery),
    FK("cuEventSynchronize", cuEventSynchronize),
};
#undef FK
}  // namespace

void* lookup_device_symbol(const char* name) {
  for (const auto& d : kDeviceSyms)
    if (strcmp(d.name, name) == 0) return d.fn;
  return nullptr;
}

}  // namespace fkrt
