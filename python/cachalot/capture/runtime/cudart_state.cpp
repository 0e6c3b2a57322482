// cudart_state.cpp -- the fake device's state: its configuration from the
// FAKE_CUDA_* variables, the two reserved virtual address ranges, the event log,
// and the allocation core behind cudaMalloc / cudaMallocAsync. See
// fake_cudart.cpp for what the fake emulates.
#include "cudart_internal.h"

namespace fkrt {

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

bool is_device_ptr(const void* p) {
  State& s = St();
  std::lock_guard<std::mutex> g(s.mu);
  uint64_t a = reinterpret_cast<uint64_t>(p);
  if (a >= s.malloc_va.base && a < s.malloc_va.base + s.malloc_va.size) return true;
  if (a >= s.reserve_va.base && a < s.reserve_va.base + s.reserve_va.size) return true;
  return false;
}

namespace {
std::mutex g_events_mu;
std::unordered_set<const void*> g_events;
}  // namespace

void event_born(const void* e) {
  std::lock_guard<std::mutex> g(g_events_mu);
  g_events.insert(e);
}

bool event_dies(const void* e) {
  std::lock_guard<std::mutex> g(g_events_mu);
  return g_events.erase(e) == 1;
}

bool event_live(const void* e) {
  std::lock_guard<std::mutex> g(g_events_mu);
  return g_events.count(e) == 1;
}

std::atomic<uint64_t> g_stream_ids{1};
FakeMemPool g_default_pools[64];

}  // namespace fkrt
