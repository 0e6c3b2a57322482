// torch's private-pool hooks for cachalot's allocator, so that CUDA-graph capture routes to
// cachalot's pools.
//
// torch's CUDAPluggableAllocator forwards beginAllocateToPool, endAllocateToPool and
// releasePool to three optional hooks (set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
// set_release_pool). From Python each setter takes the address of a C++ function, which
// torch casts to the hook's type without any check. The hook types hold C++ objects
// (c10::cuda::MempoolId_t, a std::function stream filter), so cachalot's C functions cannot be
// passed directly; the three functions here have exactly those types (checked below against
// the torch headers this file is compiled with) and call cachalot's C functions:
//
//   begin    cachalot_begin_allocate_to_pool(device, id.first, id.second, trampoline, &filter)
//   end      cachalot_end_allocate_to_pool(device, id.first, id.second)
//   release  cachalot_release_pool(device, id.first, id.second)
//
// The trampoline calls torch's filter. cachalot may call it from any thread until the pool's
// end returns, so the filter is kept here, one per open (device, pool), and destroyed after
// that. A failed call throws c10::Error with cachalot's message (torch's own text for
// misuse), which Python sees as RuntimeError.
//
// cachalot_graph_pools_bind says which loaded cachalot library the hooks call (the Python
// module, or a libcachalot_capi.so); python/cachalot/graph_pools.py compiles and binds this.

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

namespace {

using PoolId = c10::cuda::MempoolId_t;
using StreamFilter = std::function<bool(cudaStream_t)>;
using BeginHook = void(int, PoolId, StreamFilter);
using PoolHook = void(int, PoolId);

// The hook types torch's setters take, read from this torch's header: a torch whose types
// differ fails to compile here, instead of calling through a mismatched pointer.
template <class Setter>
struct SetterArgument;
template <class Class, class Argument>
struct SetterArgument<void (Class::*)(Argument)> {
  using type = Argument;
};
using Pluggable = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
static_assert(
    std::is_same_v<
        SetterArgument<decltype(&Pluggable::set_begin_allocate_to_pool)>::type,
        std::function<BeginHook>>,
    "torch's begin_allocate_to_pool hook type changed");
static_assert(
    std::is_same_v<
        SetterArgument<decltype(&Pluggable::set_end_allocate_to_pool_fn)>::type,
        std::function<PoolHook>>,
    "torch's end_allocate_to_pool hook type changed");
static_assert(
    std::is_same_v<
        SetterArgument<decltype(&Pluggable::set_release_pool)>::type,
        std::function<PoolHook>>,
    "torch's release_pool hook type changed");

// cachalot's C functions (crates/capi/include/cachalot.h).
extern "C" {
using CachalotFilter = int (*)(void* ctx, void* stream);
using CachalotBegin = int (*)(int, uint64_t, uint64_t, CachalotFilter, void*);
using CachalotPoolCall = int (*)(int, uint64_t, uint64_t);
using CachalotLastError = const char* (*)();
}

struct Library {
  CachalotBegin begin = nullptr;
  CachalotPoolCall end = nullptr;
  CachalotPoolCall release = nullptr;
  CachalotLastError last_error = nullptr;
};

std::mutex mutex;
Library library;  // guarded by `mutex`; set once by cachalot_graph_pools_bind
// The filters of the open pools, by (device, pool id): cachalot rejects beginning a pool
// that is open, so there is one at most.
std::map<std::tuple<int, uint64_t, uint64_t>, std::unique_ptr<StreamFilter>> open_filters;

Library bound() {
  std::lock_guard<std::mutex> lock(mutex);
  TORCH_CHECK(
      library.begin != nullptr,
      "cachalot's graph-pool hooks were called before cachalot_graph_pools_bind; "
      "use cachalot.torch.enable_graph_pools()");
  return library;
}

void check(const Library& lib, int rc) {
  if (rc != 0) {
    const char* why = lib.last_error ? lib.last_error() : nullptr;
    TORCH_CHECK(false, why && *why ? why : "cachalot: private pool call failed");
  }
}

// cachalot's filter: torch's std::function, called from Rust, so nothing may unwind out.
int call_filter(void* ctx, void* stream) noexcept {
  try {
    return (*static_cast<StreamFilter*>(ctx))(static_cast<cudaStream_t>(stream)) ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cachalot: torch's pool stream filter failed, not routing: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "cachalot: torch's pool stream filter failed, not routing\n");
  }
  return 0;
}

}  // namespace

extern "C" {

// Which cachalot library the hooks call: 0, or -1 if already bound to another one.
int cachalot_graph_pools_bind(
    CachalotBegin begin,
    CachalotPoolCall end,
    CachalotPoolCall release,
    CachalotLastError last_error) {
  if (!begin || !end || !release || !last_error) {
    return -1;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (library.begin && library.begin != begin) {
    return -1;
  }
  library = Library{begin, end, release, last_error};
  return 0;
}

// How many pools are open (their filters kept here), for tests.
int cachalot_graph_pools_open() {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int>(open_filters.size());
}

// The three hooks, with torch's types (extern "C" only for their names).
void cachalot_graph_pools_begin(int device, PoolId id, StreamFilter filter) {
  const Library lib = bound();
  auto owned = std::make_unique<StreamFilter>(std::move(filter));
  StreamFilter* raw = owned.get();
  check(lib, lib.begin(device, id.first, id.second, &call_filter, raw));
  std::lock_guard<std::mutex> lock(mutex);
  open_filters[{device, id.first, id.second}] = std::move(owned);
}

void cachalot_graph_pools_end(int device, PoolId id) {
  const Library lib = bound();
  check(lib, lib.end(device, id.first, id.second));
  // cachalot calls the filter only while the pool is open, under its device lock, so it is
  // not in use once end has returned.
  std::lock_guard<std::mutex> lock(mutex);
  open_filters.erase({device, id.first, id.second});
}

void cachalot_graph_pools_release(int device, PoolId id) {
  const Library lib = bound();
  check(lib, lib.release(device, id.first, id.second));
}

}  // extern "C"

static_assert(std::is_same_v<decltype(cachalot_graph_pools_begin), BeginHook>);
static_assert(std::is_same_v<decltype(cachalot_graph_pools_end), PoolHook>);
static_assert(std::is_same_v<decltype(cachalot_graph_pools_release), PoolHook>);
