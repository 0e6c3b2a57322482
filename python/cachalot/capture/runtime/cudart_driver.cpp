// cudart_driver.cpp -- the slice of the CUDA driver API that PyTorch reaches
// through cudaGetDriverEntryPointByVersion (and the fake libcuda.so.1 forwards
// to): versions and devices, the virtual memory management calls behind
// expandable segments (their physical handles count against the same capacity
// as cudaMalloc). cudart_driver_device.cpp has the rest of the driver API (contexts,
// streams, events, pools); see fake_cudart.cpp for what the fake emulates.
#include "cudart_internal.h"

namespace fkrt {

const char* cu_error_string(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    default: return "unknown error";
  }
}

CUresult fk_cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  *pStr = cu_error_string(error);
  return CUDA_SUCCESS;
}

CUresult fk_cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *pStr = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *pStr = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *pStr = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_READY: *pStr = "CUDA_ERROR_NOT_READY"; break;
    default: *pStr = "CUDA_ERROR_UNKNOWN"; break;
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuInit(unsigned int) { return CUDA_SUCCESS; }

CUresult fk_cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDART_VERSION;
  return CUDA_SUCCESS;
}

CUresult fk_cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device || !valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult fk_cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = St().device_count;
  return CUDA_SUCCESS;
}

int device_attribute(int attr) {
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return St().sm_count;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return St().l2_bytes;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return St().cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return St().cc_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return St().smem_per_sm;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return St().smem_optin;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    default: return 0;
  }
}

CUresult fk_cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pi = device_attribute(attrib);
  return CUDA_SUCCESS;
}

CUresult fk_cuMemGetAllocationGranularity(size_t* granularity,
                                          const CUmemAllocationProp*,
                                          CUmemAllocationGranularity_flags) {
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult fk_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                        const CUmemAllocationProp* prop, unsigned long long) {
  if (!handle || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  if (s.c.phys_used + size > s.capacity) {
    s.c.n_mem_create_fail++;
    emit(s, "cuMemCreate", size, 0, 0, CUDA_ERROR_OUT_OF_MEMORY);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uint64_t h = s.next_handle++;
  PhysHandle ph{size, prop ? prop->location.id : 0};
  s.handles[h] = ph;
  charge(s, size);
  s.c.n_mem_create++;
  *handle = h;
  emit(s, "cuMemCreate", size, 0, h, 0);
  return CUDA_SUCCESS;
}

void maybe_drop_handle(State& s, uint64_t h) {
  auto it = s.handles.find(h);
  if (it == s.handles.end()) return;
  if (it->second.released && it->second.map_count == 0) {
    s.c.phys_used -= it->second.size;
    s.handles.erase(it);
  }
}

CUresult fk_cuMemRelease(CUmemGenericAllocationHandle handle) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.released) {
    emit(s, "cuMemRelease", 0, 0, handle, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t sz = it->second.size;
  it->second.released = true;
  maybe_drop_handle(s, handle);
  s.c.n_mem_release++;
  emit(s, "cuMemRelease", sz, 0, handle, 0);
  return CUDA_SUCCESS;
}

CUresult fk_cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                CUdeviceptr addr, unsigned long long) {
  if (!ptr || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  uint64_t align = alignment ? alignment : kGranularity;
  if (align < kGranularity) align = kGranularity;
  (void)addr;  // address hints are ignored, as the real driver may do
  uint64_t p = s.reserve_va.alloc(size, align);
  if (!p) {
    emit(s, "cuMemAddressReserve", size, 0, 0, CUDA_ERROR_OUT_OF_MEMORY);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.reservations[p] = Reservation{size};
  s.c.n_addr_reserve++;
  s.c.va_reserved += size;
  *ptr = p;
  emit(s, "cuMemAddressReserve", size, p, 0, 0);
  return CUDA_SUCCESS;
}

CUresult fk_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second.size != size) {
    emit(s, "cuMemAddressFree", size, ptr, 0, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.reserve_va.release(ptr, size);
  s.reservations.erase(it);
  s.c.n_addr_free++;
  s.c.va_reserved -= size;
  emit(s, "cuMemAddressFree", size, ptr, 0, 0);
  return CUDA_SUCCESS;
}

bool in_reservation(State& s, uint64_t p, uint64_t len) {
  auto it = s.reservations.upper_bound(p);
  if (it == s.reservations.begin()) return false;
  --it;
  return p >= it->first && p + len <= it->first + it->second.size;
}

CUresult fk_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle handle, unsigned long long) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.released || offset != 0 || ptr % kGranularity ||
      size != h->second.size || !in_reservation(s, ptr, size)) {
    emit(s, "cuMemMap", size, ptr, handle, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  // reject overlap with an existing mapping
  auto nx = s.mappings.lower_bound(ptr);
  if (nx != s.mappings.end() && nx->first < ptr + size) {
    emit(s, "cuMemMap", size, ptr, handle, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (nx != s.mappings.begin()) {
    auto pv = std::prev(nx);
    if (pv->first + pv->second.size > ptr) {
      emit(s, "cuMemMap", size, ptr, handle, CUDA_ERROR_INVALID_VALUE);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  s.mappings[ptr] = Mapping{size, handle};
  h->second.map_count++;
  s.c.n_mem_map++;
  emit(s, "cuMemMap", size, ptr, handle, 0);
  return CUDA_SUCCESS;
}

CUresult fk_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  // The range must exactly cover whole mappings.
  uint64_t p = ptr, end = ptr + size;
  auto it = s.mappings.find(p);
  if (it == s.mappings.end()) {
    emit(s, "cuMemUnmap", size, ptr, 0, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
  }
  while (p < end) {
    it = s.mappings.find(p);
    if (it == s.mappings.end()) {
      emit(s, "cuMemUnmap", size, ptr, 0, CUDA_ERROR_INVALID_VALUE);
      return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t h = it->second.handle;
    uint64_t len = it->second.size;
    s.mappings.erase(it);
    auto hh = s.handles.find(h);
    if (hh != s.handles.end()) {
      hh->second.map_count--;
      maybe_drop_handle(s, h);
    }
    s.c.n_mem_unmap++;
    emit(s, "cuMemUnmap", len, p, h, 0);
    p += len;
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                           size_t count) {
  if (!desc || count == 0 || size == 0 || ptr % kGranularity || size % kGranularity)
    return CUDA_ERROR_INVALID_VALUE;
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  // The range must be mapped, from one mapping's start through consecutive mappings.
  for (uint64_t p = ptr, end = ptr + size; p < end;) {
    auto it = s.mappings.find(p);
    if (it == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    p += it->second.size;
  }
  return CUDA_SUCCESS;
}

CUresult fk_cuMemGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  // cudaMalloc allocations
  for (auto& kv : s.allocs) {
    if (dptr >= kv.first && dptr < kv.first + kv.second.size) {
      if (pbase) *pbase = kv.first;
      if (psize) *psize = kv.second.size;
      return CUDA_SUCCESS;
    }
  }
  auto it = s.mappings.upper_bound(dptr);
  if (it != s.mappings.begin()) {
    --it;
    if (dptr >= it->first && dptr < it->first + it->second.size) {
      if (pbase) *pbase = it->first;
      if (psize) *psize = it->second.size;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult fk_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  auto it = s.mappings.upper_bound(a);
  if (it == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (a < it->first || a >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  if (handle) *handle = it->second.handle;
  return CUDA_SUCCESS;
}

CUresult fk_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                   CUmemGenericAllocationHandle handle) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.handles.find(handle);
  if (!prop || it == s.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  memset(prop, 0, sizeof(*prop));
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = it->second.device;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return CUDA_SUCCESS;
}

CUresult fk_cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle,
                                         CUmemAllocationHandleType, unsigned long long) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult fk_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*,
                                           CUmemAllocationHandleType) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult fk_cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream) {
  return CUDA_SUCCESS;
}

CUresult fk_cuStreamWriteValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  return CUDA_SUCCESS;
}

struct DriverSym {
  const char* name;
  void* fn;
};

#define FK(name) {#name, reinterpret_cast<void*>(&fk_##name)}
const DriverSym kDriverSyms[] = {
    FK(cuGetErrorString),
    FK(cuGetErrorName),
    FK(cuInit),
    FK(cuDriverGetVersion),
    FK(cuDeviceGet),
    FK(cuDeviceGetCount),
    FK(cuDeviceGetAttribute),
    FK(cuMemGetAllocationGranularity),
    FK(cuMemCreate),
    FK(cuMemRelease),
    FK(cuMemAddressReserve),
    FK(cuMemAddressFree),
    FK(cuMemMap),
    FK(cuMemUnmap),
    FK(cuMemSetAccess),
    {"cuMemGetAddressRange", reinterpret_cast<void*>(&fk_cuMemGetAddressRange)},
    {"cuMemGetAddressRange_v2", reinterpret_cast<void*>(&fk_cuMemGetAddressRange)},
    FK(cuMemRetainAllocationHandle),
    FK(cuMemGetAllocationPropertiesFromHandle),
    FK(cuMemExportToShareableHandle),
    FK(cuMemImportFromShareableHandle),
    FK(cuMemsetD32Async),
    FK(cuStreamWriteValue32),
};
#undef FK

void* lookup_driver_symbol(const char* name) {
  if (!name) return nullptr;
  for (const auto& d : kDriverSyms)
    if (strcmp(d.name, name) == 0) return d.fn;
  if (void* fn = lookup_device_symbol(name)) return fn;
  return lookup_module_symbol(name);  // cudart_modules.cpp: Triton's modules and launches
}

}  // namespace fkrt
