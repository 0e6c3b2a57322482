// cudart_modules.cpp -- the driver API that Triton (and so torch.compile's Inductor) needs to
// load and launch the kernels it compiles: modules and functions (cuModuleLoadData,
// cuModuleGetFunction, cuFuncGetAttribute/SetAttribute), launches (cuLaunchKernel,
// cuLaunchKernelEx), occupancy queries, pointer attributes, context limits and TMA
// descriptors; plus the runtime's deterministic clock, which gives CUDA events their times.
//
// As every kernel on the capture runtime, a launched kernel computes nothing: the launch is
// checked (a known function, a sane grid) and counted, and it moves the clock on by a fixed
// cost, so that timing by events (Inductor's and Triton's autotuning benchmarks) sees time
// pass, the same on every run. Every handle given out is remembered: a foreign or unloaded
// CUmodule/CUfunction is CUDA_ERROR_INVALID_HANDLE, never a use of freed memory.
//
// fakecuda_module_counters() reports what was loaded and launched (the tests read it).
#include <vector>

#include "cudart_internal.h"

namespace fkrt {
namespace {

struct FakeFunction;

struct FakeModule {
  std::vector<FakeFunction*> functions;
};

struct FakeFunction {
  FakeModule* module;
  std::string name;
  int max_dynamic_smem = 0;
};

std::mutex g_mu;
std::unordered_set<const void*> g_modules;    // live CUmodule handles
std::unordered_set<const void*> g_functions;  // live CUfunction handles
std::unordered_map<const void*, uint64_t> g_event_ns;  // the clock when each event was recorded
std::atomic<uint64_t> g_clock_ns{0};
std::atomic<uint64_t> g_modules_loaded{0}, g_launches{0};

// What a launch, and a recorded event, cost on the clock: fixed, so that autotuning sees
// every candidate equally fast and keeps the first, on every run.
constexpr uint64_t kLaunchNs = 5000;
constexpr uint64_t kEventNs = 1000;

FakeFunction* function_of(CUfunction f) {
  std::lock_guard<std::mutex> g(g_mu);
  return g_functions.count(f) ? reinterpret_cast<FakeFunction*>(f) : nullptr;
}

CUresult load(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  auto* m = new FakeModule{};
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_modules.insert(m);
  }
  g_modules_loaded.fetch_add(1, std::memory_order_relaxed);
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult fk_cuModuleLoadData(CUmodule* module, const void* image) { return load(module, image); }

// torch's static Triton launcher loads the cubin Inductor wrote, by its path.
CUresult fk_cuModuleLoad(CUmodule* module, const char* fname) {
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  FILE* f = fopen(fname, "rb");
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  unsigned char magic[4] = {0, 0, 0, 0};
  size_t n = fread(magic, 1, 4, f);
  fclose(f);
  if (n != 4 || magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F')
    return CUDA_ERROR_INVALID_IMAGE;  // not a cubin
  return load(module, fname);
}

CUresult fk_cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*,
                               void**) {
  return load(module, image);
}

CUresult fk_cuModuleUnload(CUmodule hmod) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_modules.erase(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  auto* m = reinterpret_cast<FakeModule*>(hmod);
  for (FakeFunction* f : m->functions) {
    g_functions.erase(f);
    delete f;
  }
  delete m;
  return CUDA_SUCCESS;
}

CUresult fk_cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (!hfunc || !name || !*name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_modules.count(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  auto* m = reinterpret_cast<FakeModule*>(hmod);
  for (FakeFunction* f : m->functions)
    if (f->name == name) {
      *hfunc = reinterpret_cast<CUfunction>(f);
      return CUDA_SUCCESS;
    }
  auto* f = new FakeFunction{m, name};
  m->functions.push_back(f);
  g_functions.insert(f);
  *hfunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult fk_cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  FakeFunction* f = function_of(hfunc);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_smem; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = St().cc_major * 10 + St().cc_minor; break;
    default: *pi = 0; break;  // static shared memory, local (spill) bytes, constants: none
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  FakeFunction* f = function_of(hfunc);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > St().smem_optin) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_smem = value;
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache) {
  return function_of(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned smem, CUstream stream) {
  if (!function_of(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz || uint64_t(bx) * by * bz > 1024 || gy > 65535 ||
      gz > 65535 || smem > unsigned(St().smem_optin))
    return CUDA_ERROR_INVALID_VALUE;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  capture_kernel(stream);
  g_clock_ns.fetch_add(kLaunchNs, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult fk_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned smem, CUstream stream, void**,
                           void**) {
  return launch(f, gx, gy, gz, bx, by, bz, smem, stream);
}

CUresult fk_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                      CUstream stream, void**) {
  return launch(f, gx, gy, gz, bx, by, bz, smem, stream);
}

CUresult fk_cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void**, void**) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                c->blockDimZ, c->sharedMemBytes, c->hStream);
}

CUresult fk_cuOccupancyMaxActiveClusters(int* num, CUfunction f, const CUlaunchConfig* c) {
  if (!num || !c) return CUDA_ERROR_INVALID_VALUE;
  if (!function_of(f)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned cluster = 1;
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      cluster = c->attrs[i].value.clusterDim.x * c->attrs[i].value.clusterDim.y *
                c->attrs[i].value.clusterDim.z;
  // one block of the config per SM, clusters of `cluster` blocks
  *num = cluster ? St().sm_count / int(cluster) : 0;
  return CUDA_SUCCESS;
}

CUresult fk_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* num, CUfunction f, int block,
                                                        size_t smem) {
  if (!num || block <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!function_of(f)) return CUDA_ERROR_INVALID_HANDLE;
  int by_threads = 2048 / block, by_smem = smem ? int(St().smem_per_sm / smem) : 32;
  *num = std::min(32, std::min(by_threads, by_smem));
  return CUDA_SUCCESS;
}

CUresult fk_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num, CUfunction f,
                                                                 int block, size_t smem,
                                                                 unsigned) {
  return fk_cuOccupancyMaxActiveBlocksPerMultiprocessor(num, f, block, smem);
}

CUresult fk_cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = t_device;
  return CUDA_SUCCESS;
}

size_t g_limits[16];

CUresult fk_cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (!value || unsigned(limit) >= 16) return CUDA_ERROR_INVALID_VALUE;
  *value = g_limits[limit];
  return CUDA_SUCCESS;
}

CUresult fk_cuCtxSetLimit(CUlimit limit, size_t value) {
  if (unsigned(limit) >= 16) return CUDA_ERROR_INVALID_VALUE;
  g_limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult fk_cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
  cudaError_t before = t_last_error;
  cudaError_t e = cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &s);
  t_last_error = before;
  if (e != cudaSuccess) return CUDA_ERROR_INVALID_HANDLE;
  *status = static_cast<CUstreamCaptureStatus>(s);
  return CUDA_SUCCESS;
}

CUresult pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (!is_device_ptr(reinterpret_cast<const void*>(ptr))) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = t_device; break;
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      CUcontext ctx = nullptr;
      auto get = reinterpret_cast<CUresult (*)(CUcontext*)>(lookup_device_symbol("cuCtxGetCurrent"));
      if (get) get(&ctx);
      *static_cast<CUcontext*>(data) = ctx;
      break;
    }
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<int*>(data) = attr == CU_POINTER_ATTRIBUTE_MAPPED; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  return pointer_attribute(data, attr, ptr);
}

CUresult fk_cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data,
                                   CUdeviceptr ptr) {
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    CUresult r = pointer_attribute(data[i], attrs[i], ptr);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// A TMA descriptor describes a tensor for the copy engine; nothing reads it here, so it is
// zeroed once its address is checked.
CUresult fk_cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t rank,
                                   void* addr, const cuuint64_t*, const cuuint64_t*,
                                   const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill) {
  if (!map || rank == 0 || rank > 5 || !is_device_ptr(addr)) return CUDA_ERROR_INVALID_VALUE;
  memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}

CUresult fk_cuTensorMapEncodeIm2col(CUtensorMap* map, CUtensorMapDataType, cuuint32_t rank,
                                    void* addr, const cuuint64_t*, const cuuint64_t*,
                                    const int*, const int*, cuuint32_t, cuuint32_t,
                                    const cuuint32_t*, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                                    CUtensorMapFloatOOBfill) {
  if (!map || rank < 3 || rank > 5 || !is_device_ptr(addr)) return CUDA_ERROR_INVALID_VALUE;
  memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}

struct ModuleSym {
  const char* name;
  void* fn;
};

#define FK(name) {#name, reinterpret_cast<void*>(&fk_##name)}
const ModuleSym kModuleSyms[] = {
    FK(cuModuleLoadData),
    FK(cuModuleLoad),
    FK(cuModuleLoadDataEx),
    FK(cuModuleUnload),
    FK(cuModuleGetFunction),
    FK(cuFuncGetAttribute),
    FK(cuFuncSetAttribute),
    FK(cuFuncSetCacheConfig),
    FK(cuLaunchKernel),
    FK(cuLaunchCooperativeKernel),
    FK(cuLaunchKernelEx),
    FK(cuOccupancyMaxActiveClusters),
    FK(cuOccupancyMaxActiveBlocksPerMultiprocessor),
    FK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    FK(cuCtxGetDevice),
    FK(cuCtxGetLimit),
    FK(cuCtxSetLimit),
    FK(cuStreamIsCapturing),
    FK(cuPointerGetAttribute),
    FK(cuPointerGetAttributes),
    FK(cuTensorMapEncodeTiled),
    FK(cuTensorMapEncodeIm2col),
};
#undef FK

}  // namespace

void* lookup_module_symbol(const char* name) {
  for (const auto& d : kModuleSyms)
    if (strcmp(d.name, name) == 0) return d.fn;
  return nullptr;
}

void clock_event_record(const void* event) {
  uint64_t now = g_clock_ns.fetch_add(kEventNs, std::memory_order_relaxed) + kEventNs;
  std::lock_guard<std::mutex> g(g_mu);
  g_event_ns[event] = now;
}

void clock_event_forget(const void* event) {
  std::lock_guard<std::mutex> g(g_mu);
  g_event_ns.erase(event);
}

bool clock_elapsed_ms(const void* start, const void* end, float* ms) {
  std::lock_guard<std::mutex> g(g_mu);
  auto a = g_event_ns.find(start), b = g_event_ns.find(end);
  if (a == g_event_ns.end() || b == g_event_ns.end()) return false;  // not recorded
  *ms = float(double(int64_t(b->second - a->second)) / 1e6);
  return true;
}

}  // namespace fkrt

extern "C" {
// Modules loaded and kernels launched through the driver API (Triton's) so far.
__attribute__((visibility("default"))) void fakecuda_module_counters(uint64_t* modules_loaded,
                                                                      uint64_t* launches) {
  if (modules_loaded) *modules_loaded = fkrt::g_modules_loaded.load();
  if (launches) *launches = fkrt::g_launches.load();
}
}
