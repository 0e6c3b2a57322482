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

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <sys/mman.h>

#include "fakecuda_ext.h"

namespace {

constexpr uint64_t KiB = 1024ull, MiB = KiB * 1024, GiB = MiB * 1024,
                   TiB = GiB * 1024;
constexpr uint64_t kSmallAlign = 512;
constexpr uint64_t kLargeAlign = 2 * MiB;
constexpr uint64_t kGranularity = 2 * MiB;  // cuMemGetAllocationGranularity

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t parse_bytes(const char* s, uint64_t dflt) {
  if (!s || !*s) return dflt;
  char* end = nullptr;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) {
    fprintf(stderr, "[fake_cudart] cannot parse size '%s', using default\n", s);
    return dflt;
  }
  uint64_t mult = 1;
  while (*end == ' ') ++end;
  switch (*end) {
    case 'k': case 'K': mult = KiB; break;
    case 'm': case 'M': mult = MiB; break;
    case 'g': case 'G': mult = GiB; break;
    case 't': case 'T': mult = TiB; break;
    default: break;
  }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

// First-fit allocator over a virtual address range. Never touches memory.
struct RangeAllocator {
  uint64_t base = 0, size = 0;
  std::map<uint64_t, uint64_t> free_;  // start -> length, coalesced
  void init(uint64_t b, uint64_t s) {
    base = b;
    size = s;
    free_.clear();
    free_[b] = s;
  }
  // returns 0 on failure
  uint64_t alloc(uint64_t len, uint64_t align) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      uint64_t start = round_up(it->first, align);
      uint64_t end = it->first + it->second;
      if (start + len > end) continue;
      uint64_t fstart = it->first, flen = it->second;
      free_.erase(it);
      if (start > fstart) free_[fstart] = start - fstart;
      if (start + len < fstart + flen) free_[start + len] = fstart + flen - (start + len);
      return start;
    }
    return 0;
  }
  void release(uint64_t start, uint64_t len) {
    auto next = free_.lower_bound(start);
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && start + len == next->first) {
      len += next->second;
      free_.erase(next);
    }
    free_[start] = len;
  }
};

struct DevAlloc {
  uint64_t size;     // requested
  uint64_t charged;  // rounded, counted against capacity
  bool async;
};

struct PhysHandle {
  uint64_t size;
  int device;
  int map_count = 0;
  bool released = false;
};

struct Mapping {
  uint64_t size;
  uint64_t handle;
};

struct Reservation {
  uint64_t size;
};

struct State {
  std::mutex mu;
  bool inited = false;
  uint64_t capacity = 80 * GiB;
  uint64_t reserved_overhead = 0;
  uint64_t reported_total = 0;  // what the device says it has (FAKE_CUDA_TOTAL, default capacity)
  int device_count = 1;
  bool verbose = false;
  FILE* log = nullptr;
  bool log_flush = true;
  std::string device_name;
  int cc_major = 9, cc_minor = 0, sm_count = 132;
  int l2_bytes = 50331648, smem_per_sm = 233472, smem_optin = 232448;
  void (*d2h_cb)(uint64_t bytes, void* user) = nullptr;
  void* d2h_user = nullptr;

  RangeAllocator malloc_va;
  RangeAllocator reserve_va;
  std::unordered_map<uint64_t, DevAlloc> allocs;     // cudaMalloc'd ptr -> info
  std::map<uint64_t, Reservation> reservations;      // VA reservations
  std::map<uint64_t, Mapping> mappings;               // mapped VA start -> mapping
  std::unordered_map<uint64_t, PhysHandle> handles;  // cuMemCreate handles
  uint64_t next_handle = 1;
  uint64_t async_used = 0, async_peak = 0;

  fakecuda_counters c{};
  uint64_t seq = 0;
  fakecuda_event_cb cb = nullptr;
  void* cb_user = nullptr;
};

State& S() {
  static State* s = new State();  // never destroyed: safe at exit
  return *s;
}

// Keep the host from ever mapping anything inside a fake device range.
void reserve_host_va(State& s, uint64_t base, uint64_t size) {
  void* want = reinterpret_cast<void*>(base);
  void* got = mmap(want, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED || got != want) {
    if (got != MAP_FAILED) munmap(got, size);
    fprintf(stderr,
            "[fake_cudart] warning: could not reserve host VA [0x%llx, +0x%llx) (%s); fake device "
            "pointers may alias host memory (set FAKE_CUDA_VA_BASE)\n",
            (unsigned long long)base, (unsigned long long)size, strerror(errno));
  }
  (void)s;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

void init_locked(State& s) {
  if (s.inited) return;
  s.inited = true;
  s.capacity = parse_bytes(getenv("FAKE_CUDA_CAPACITY"), 80 * GiB);
  s.reserved_overhead = parse_bytes(getenv("FAKE_CUDA_RESERVED"), 0);
  if (s.reserved_overhead > s.capacity) s.reserved_overhead = s.capacity;
  // A capture enforces no limit (capacity is huge) but lets the program see the
  // memory size of the GPU being predicted, for code that sizes work by it.
  s.reported_total = parse_bytes(getenv("FAKE_CUDA_TOTAL"), s.capacity);
  const char* dc = getenv("FAKE_CUDA_DEVICE_COUNT");
  s.device_count = dc && *dc ? atoi(dc) : 1;
  if (s.device_count < 0) s.device_count = 0;
  const char* vb = getenv("FAKE_CUDA_VERBOSE");
  s.verbose = vb && *vb && strcmp(vb, "0") != 0;
  const char* nm = getenv("FAKE_CUDA_DEVICE_NAME");
  s.device_name = nm && *nm ? nm : "NVIDIA H100 80GB HBM3 (fake_cudart)";
  if (const char* cc = getenv("FAKE_CUDA_CC")) {
    int major = 0, minor = 0;
    if (sscanf(cc, "%d.%d", &major, &minor) == 2 && major > 0) {
      s.cc_major = major;
      s.cc_minor = minor;
    } else {
      fprintf(stderr, "[fake_cudart] FAKE_CUDA_CC='%s' is not MAJOR.MINOR, keeping 9.0\n", cc);
    }
  }
  auto int_env = [](const char* name, int& field) {
    const char* v = getenv(name);
    if (v && *v) {
      long x = strtol(v, nullptr, 10);
      if (x > 0 && x < (1L << 31)) field = static_cast<int>(x);
    }
  };
  int_env("FAKE_CUDA_SMS", s.sm_count);
  int_env("FAKE_CUDA_L2", s.l2_bytes);
  int_env("FAKE_CUDA_SMEM_SM", s.smem_per_sm);
  int_env("FAKE_CUDA_SMEM_OPTIN", s.smem_optin);

  // Device virtual address space. Two ranges, both reserved in THIS process
  // with mmap(PROT_NONE, MAP_NORESERVE) so that no host mapping can ever land
  // inside them (no memory is committed; touching them faults). That keeps the
  // fake device pointers disjoint from host pointers (memcpy direction checks,
  // cudaPointerGetAttributes) and makes the addresses reproducible run to run.
  // Defaults sit at 16 TiB / 32 TiB, away from where Linux x86-64 places PIE
  // images (0x55..), the brk heap and the ASLR'd mmap area (0x7e..-0x7f..).
  //  * cudaMalloc range: first-fit over [base, base + max(8*capacity, 64 GiB))
  //  * cuMemAddressReserve range (expandable segments reserve ~1.125x device
  //    memory per (stream, pool)): 32 TiB.
  uint64_t range = s.capacity * 8;
  if (range < 64 * GiB) range = 64 * GiB;
  range = round_up(range, kLargeAlign);
  uint64_t base = 0x100000000000ull;
  if (const char* vb2 = getenv("FAKE_CUDA_VA_BASE"))
    if (*vb2) base = strtoull(vb2, nullptr, 0);
  base = round_up(base, kLargeAlign);
  uint64_t rbase = round_up(base + range, TiB);
  if (rbase < 0x200000000000ull) rbase = 0x200000000000ull;
  uint64_t rsize = 32 * TiB;
  s.malloc_va.init(base, range);
  s.reserve_va.init(rbase, rsize);
  reserve_host_va(s, base, range);
  reserve_host_va(s, rbase, rsize);
  s.c.capacity = s.capacity;
  s.c.phys_used = s.reserved_overhead;
  s.c.phys_peak = s.reserved_overhead;

  const char* lp = getenv("FAKE_CUDA_LOG");
  if (lp && *lp) {
    s.log = fopen(lp, "w");
    if (!s.log) {
      fprintf(stderr, "[fake_cudart] cannot open FAKE_CUDA_LOG=%s\n", lp);
    } else {
      fprintf(s.log, "seq,op,size,ptr,handle,result,phys_used\n");
      fflush(s.log);
      const char* lf = getenv("FAKE_CUDA_LOG_FLUSH");
      s.log_flush = !(lf && strcmp(lf, "0") == 0);
    }
  }
}

State& St() {
  State& s = S();
  if (!s.inited) {
    std::lock_guard<std::mutex> g(s.mu);
    init_locked(s);
  }
  return s;
}

void emit(State& s, const char* op, uint64_t size, uint64_t ptr, uint64_t handle,
          int result) {
  fakecuda_event ev{++s.seq, op, size, ptr, handle, result, s.c.phys_used};
  if (s.log) {
    fprintf(s.log, "%llu,%s,%llu,0x%llx,%llu,%d,%llu\n",
            (unsigned long long)ev.seq, op, (unsigned long long)size,
            (unsigned long long)ptr, (unsigned long long)handle, result,
            (unsigned long long)ev.phys_used);
    if (s.log_flush) fflush(s.log);
  }
  if (s.cb) s.cb(&ev, s.cb_user);
}

void charge(State& s, uint64_t bytes) {
  s.c.phys_used += bytes;
  if (s.c.phys_used > s.c.phys_peak) s.c.phys_peak = s.c.phys_used;
}

cudaError_t set_err(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

bool valid_device(int d) { return d >= 0 && d < St().device_count; }

// --- allocation core shared by cudaMalloc / cudaMallocAsync ----------------
cudaError_t do_malloc(void** devPtr, size_t size, bool async) {
  if (!devPtr) return set_err(cudaErrorInvalidValue);
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  const char* op = async ? "cudaMallocAsync" : "cudaMalloc";
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  uint64_t align = size >= kLargeAlign ? kLargeAlign : kSmallAlign;
  uint64_t charged = round_up(size, align);
  if (s.c.phys_used + charged > s.capacity) {
    *devPtr = nullptr;
    s.c.n_malloc_fail++;
    emit(s, op, size, 0, 0, cudaErrorMemoryAllocation);
    return set_err(cudaErrorMemoryAllocation);
  }
  uint64_t p = s.malloc_va.alloc(charged, align);
  if (!p) {
    *devPtr = nullptr;
    s.c.n_malloc_fail++;
    emit(s, op, size, 0, 0, cudaErrorMemoryAllocation);
    return set_err(cudaErrorMemoryAllocation);
  }
  s.allocs[p] = DevAlloc{size, charged, async};
  charge(s, charged);
  if (async) {
    s.c.n_malloc_async++;
    s.async_used += charged;
    if (s.async_used > s.async_peak) s.async_peak = s.async_used;
  } else {
    s.c.n_malloc++;
  }
  *devPtr = reinterpret_cast<void*>(p);
  emit(s, op, size, p, 0, 0);
  return cudaSuccess;
}

cudaError_t do_free(void* devPtr, bool async) {
  if (!devPtr) return cudaSuccess;
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  const char* op = async ? "cudaFreeAsync" : "cudaFree";
  auto it = s.allocs.find(reinterpret_cast<uint64_t>(devPtr));
  if (it == s.allocs.end()) {
    emit(s, op, 0, reinterpret_cast<uint64_t>(devPtr), 0, cudaErrorInvalidValue);
    return set_err(cudaErrorInvalidValue);
  }
  DevAlloc a = it->second;
  s.allocs.erase(it);
  s.malloc_va.release(reinterpret_cast<uint64_t>(devPtr), a.charged);
  s.c.phys_used -= a.charged;
  if (a.async) {
    s.async_used -= a.charged;
    s.c.n_free_async++;
  } else {
    s.c.n_free++;
  }
  emit(s, op, a.size, reinterpret_cast<uint64_t>(devPtr), 0, 0);
  return cudaSuccess;
}

// Is p inside a fake device allocation or reservation?
bool is_device_ptr(const void* p) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  uint64_t a = reinterpret_cast<uint64_t>(p);
  if (a >= s.malloc_va.base && a < s.malloc_va.base + s.malloc_va.size) return true;
  if (a >= s.reserve_va.base && a < s.reserve_va.base + s.reserve_va.size) return true;
  return false;
}

// --- opaque handles -----------------------------------------------------------
struct FakeStream { int device; int priority; unsigned flags; uint64_t id; };
struct FakeEvent { unsigned flags; };
struct FakeMemPool { int device; };
std::atomic<uint64_t> g_stream_ids{1};
FakeMemPool g_default_pools[64];

// --- driver API (returned through cudaGetDriverEntryPointByVersion) --------
const char* cu_error_string(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
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
  if (h == s.handles.end() || h->second.released || offset != 0 ||
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

CUresult fk_cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) {
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

CUresult fk_cuCtxGetCurrent(CUcontext* pctx) {
  static int dummy_ctx;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(&dummy_ctx);
  return CUDA_SUCCESS;
}

CUresult fk_cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }

CUresult fk_cuDevicePrimaryCtxGetState(CUdevice, unsigned int* flags, int* active) {
  if (flags) *flags = 0;
  if (active) *active = 1;
  return CUDA_SUCCESS;
}

CUresult fk_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice) {
  return fk_cuCtxGetCurrent(pctx);
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
    FK(cuCtxGetCurrent),
    FK(cuCtxSetCurrent),
    FK(cuDevicePrimaryCtxGetState),
    FK(cuDevicePrimaryCtxRetain),
};
#undef FK

void* lookup_driver_symbol(const char* name) {
  if (!name) return nullptr;
  for (const auto& d : kDriverSyms)
    if (strcmp(d.name, name) == 0) return d.fn;
  return nullptr;
}

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
  prop->hostNumaId = -1;
  prop->deviceNumaId = -1;
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

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return set_err(cudaErrorInvalidValue);
  *ptr = size ? malloc(size) : nullptr;
  return (*ptr || !size) ? cudaSuccess : set_err(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  return cudaMallocHost(pHost, size);
}
cudaError_t cudaFreeHost(void* ptr) {
  free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }
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
    memset(dst, 0, count);  // device memory is not backed: reads give zeros
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
    State& s = St();
    std::lock_guard<std::mutex> g(s.mu);
    s.c.n_h2d++;
    s.c.h2d_bytes += count;
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
cudaError_t cudaMemset(void*, int, size_t) { return cudaSuccess; }
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t) { return cudaSuccess; }

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
cudaError_t cudaStreamIsCapturing(cudaStream_t, enum cudaStreamCaptureStatus* pCaptureStatus) {
  if (!pCaptureStatus) return set_err(cudaErrorInvalidValue);
  *pCaptureStatus = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  if (captureStatus_out) *captureStatus_out = cudaStreamCaptureStatusNone;
  if (id_out) *id_out = 0;
  if (graph_out) *graph_out = nullptr;
  if (dependencies_out) *dependencies_out = nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (!mode) return set_err(cudaErrorInvalidValue);
  cudaStreamCaptureMode old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*,
                                         size_t* pNumDependencies) {
  if (pNumDependencies) *pNumDependencies = 0;
  return cudaSuccess;
}

// ---- events -----------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return set_err(cudaErrorInvalidValue);
  *event = reinterpret_cast<cudaEvent_t>(new FakeEvent{flags});
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<FakeEvent*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t, unsigned int) {
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  if (!ms) return set_err(cudaErrorInvalidValue);
  *ms = 0.0f;
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
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
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
