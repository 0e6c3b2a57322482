// cudart_internal.h -- what the three parts of the fake libcudart.so.13 share:
// the device state (one per process), its allocation core and the handle
// types. cudart_state.cpp holds the state, cudart_driver.cpp the driver API that
// torch reaches through cudaGetDriverEntryPointByVersion, fake_cudart.cpp the
// exported runtime API. Everything here is in namespace fkrt and stays local to
// the library (libcudart.map exports only cuda*, __cuda* and fakecuda_*).
// cudart_driver_device.cpp adds the driver API a CUDA device of its own needs.
#pragma once

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
#include <unordered_set>
#include <unordered_map>

#include <sys/mman.h>

#include "fakecuda_ext.h"

namespace fkrt {

constexpr uint64_t KiB = 1024ull, MiB = KiB * 1024, GiB = MiB * 1024,
                   TiB = GiB * 1024;
constexpr uint64_t kSmallAlign = 512;
constexpr uint64_t kLargeAlign = 2 * MiB;
constexpr uint64_t kGranularity = 2 * MiB;  // cuMemGetAllocationGranularity

inline uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// A size as FAKE_CUDA_* variables give it (suffixes K/M/G/T); `dflt` if unset.
uint64_t parse_bytes(const char* s, uint64_t dflt);

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

// The one device state, initialised from the environment on first use (St()),
// or as it is (S()).
State& S();
State& St();

// Reports one device-level event to the log and the event callback.
void emit(State& s, const char* op, uint64_t size, uint64_t ptr, uint64_t handle,
          int result);
// Counts `bytes` more as physically used.
void charge(State& s, uint64_t bytes);
// Records `e` as the thread's last error (unless success) and returns it.
cudaError_t set_err(cudaError_t e);
bool valid_device(int d);

extern thread_local int t_device;
extern thread_local cudaError_t t_last_error;
extern thread_local cudaStreamCaptureMode t_capture_mode;

// The allocation core shared by cudaMalloc / cudaMallocAsync and their frees.
cudaError_t do_malloc(void** devPtr, size_t size, bool async);
cudaError_t do_free(void* devPtr, bool async);
// Is p inside a fake device allocation or reservation?
bool is_device_ptr(const void* p);

// The known bytes of device memory (cudart_shadow.cpp): kept from host-to-device copies,
// moved by device-to-device ones, read back by device-to-host ones, dropped by memset/free.
void shadow_h2d(void* dst, const void* src, size_t n);
void shadow_d2d(void* dst, const void* src, size_t n);
void shadow_d2h(void* dst, const void* src, size_t n);
void shadow_drop(const void* p, size_t n);

// --- opaque handles -----------------------------------------------------------
struct FakeStream { int device; int priority; unsigned flags; uint64_t id; };
struct FakeEvent { unsigned flags; };
struct FakeMemPool { int device; };
extern std::atomic<uint64_t> g_stream_ids;
extern FakeMemPool g_default_pools[64];

// The value of device attribute `attr` (cudaDeviceAttr and CUdevice_attribute
// share their numbers), for the runtime and the driver API alike.
int device_attribute(int attr);

// The driver-API implementation named `name` (cudart_driver.cpp, then
// lookup_device_symbol), or nullptr.
void* lookup_driver_symbol(const char* name);
// The driver API of cudart_driver_device.cpp named `name`, or nullptr.
void* lookup_device_symbol(const char* name);
// The driver API of cudart_modules.cpp (modules, launches: Triton's) named `name`, or nullptr.
void* lookup_module_symbol(const char* name);

// cudart_modules.cpp's deterministic clock: an event's time when recorded, the time between
// two recorded events (false if either was not recorded), an event destroyed.
void clock_event_record(const void* event);
bool clock_elapsed_ms(const void* start, const void* end, float* ms);
void clock_event_forget(const void* event);

// cudart_graphs.cpp: whether `stream` is capturing a CUDA graph, and its capture id and graph.
cudaStreamCaptureStatus capture_status(const void* stream, unsigned long long* id,
                                       cudaGraph_t* graph);
// A kernel launched on `stream`: a node of its graph if it is capturing.
void capture_kernel(const void* stream);

// Events alive (created and not yet destroyed), so that a destroyed or foreign handle is an
// error, never a use of freed memory.
void event_born(const void* e);
bool event_dies(const void* e);  // false: not alive
bool event_live(const void* e);

}  // namespace fkrt
