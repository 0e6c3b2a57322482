// cudart_shadow.cpp -- the few bytes of device memory whose value is known without computing.
//
// Device memory is bookkeeping only, so a device-to-host copy reads zeros. Some programs read
// back what they wrote themselves: a small host tensor copied to the device, passed through a
// collective and copied back (DDP's bucket indices and parameter-shape check, the object
// collectives' sizes and bytes). For those, the bytes of each host-to-device copy of at most
// kMaxShadow bytes are kept ("shadows"), moved by device-to-device copies and by the simulated
// NCCL's collectives (fakecuda_shadow_copy: each rank sees its own data, as in a job whose ranks
// agree; a broadcast hands the root's known bytes to the other ranks through files, see
// fake_nccl.cpp), and returned by later device-to-host copies of the same bytes. A memset, a free, or a
// copy of unknown bytes onto a shadow drops it; kernels write nothing, so their outputs read 0.
//
// The capture's value tracking (python/cachalot/capture/values.py) adds two things: it writes
// the bytes of a tensor it computed on the CPU just before the program reads that tensor
// (fakecuda_shadow_write, then drops them again), and for an op whose output shape depends on
// data held in a buffer of the op's own (nonzero's count), it arms one answer for the next
// device-to-host copy of exactly that size on the calling thread (fakecuda_shadow_answer_next).
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "cudart_internal.h"

namespace fkrt {

constexpr size_t kMaxShadow = 1 << 20;    // bytes kept of one copy
constexpr size_t kMaxTotal = 256u << 20;  // bytes kept in all

static std::mutex g_mu;
static std::map<uintptr_t, std::vector<char>> g_shadows;  // start address -> bytes
static size_t g_total = 0;

// Drops (under g_mu) every shadow overlapping [a, a + n).
static void drop_locked(uintptr_t a, size_t n) {
  auto it = g_shadows.upper_bound(a);
  if (it != g_shadows.begin()) --it;
  while (it != g_shadows.end() && it->first < a + n) {
    if (it->first + it->second.size() > a) {
      g_total -= it->second.size();
      it = g_shadows.erase(it);
    } else {
      ++it;
    }
  }
}

static void put_locked(uintptr_t a, const char* data, size_t n) {
  drop_locked(a, n);
  if (n == 0 || n > kMaxShadow || g_total + n > kMaxTotal) return;
  g_shadows.emplace(a, std::vector<char>(data, data + n));
  g_total += n;
}

// The shadow holding all of [a, a + n), or nullptr.
static const char* find_locked(uintptr_t a, size_t n) {
  auto it = g_shadows.upper_bound(a);
  if (it == g_shadows.begin()) return nullptr;
  --it;
  if (it->first + it->second.size() < a + n) return nullptr;
  return it->second.data() + (a - it->first);
}

void shadow_h2d(void* dst, const void* src, size_t n) {
  std::lock_guard<std::mutex> g(g_mu);
  put_locked(reinterpret_cast<uintptr_t>(dst), static_cast<const char*>(src), n);
}

void shadow_d2d(void* dst, const void* src, size_t n) {
  std::lock_guard<std::mutex> g(g_mu);
  uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d == s) return;
  const char* known = find_locked(s, n);
  if (!known) {
    drop_locked(d, n);
    return;
  }
  std::vector<char> copy(known, known + n);  // the source may be dropped by the put
  put_locked(d, copy.data(), n);
}

// One armed answer per thread: the next device-to-host copy of exactly its size returns it.
static thread_local std::vector<char> t_answer;
static thread_local bool t_armed = false;
static thread_local uint64_t t_answered = 0;  // armed answers taken on this thread

void shadow_d2h(void* dst, const void* src, size_t n) {
  if (t_armed && t_answer.size() == n) {
    memcpy(dst, t_answer.data(), n);
    t_armed = false;
    t_answered++;
    return;
  }
  std::lock_guard<std::mutex> g(g_mu);
  uintptr_t s = reinterpret_cast<uintptr_t>(src);
  auto it = g_shadows.upper_bound(s);
  if (it != g_shadows.begin()) --it;
  for (; it != g_shadows.end() && it->first < s + n; ++it) {
    uintptr_t lo = it->first > s ? it->first : s;
    uintptr_t hi = it->first + it->second.size() < s + n ? it->first + it->second.size() : s + n;
    if (lo < hi)
      memcpy(static_cast<char*>(dst) + (lo - s), it->second.data() + (lo - it->first), hi - lo);
  }
}

void shadow_drop(const void* p, size_t n) {
  std::lock_guard<std::mutex> g(g_mu);
  drop_locked(reinterpret_cast<uintptr_t>(p), n);
}

}  // namespace fkrt

// For the simulated NCCL: a collective's result is the rank's own data (see the top).
extern "C" __attribute__((visibility("default"))) void fakecuda_shadow_copy(void* dst,
                                                                           const void* src,
                                                                           size_t n) {
  fkrt::shadow_d2d(dst, src, n);
}

// For the simulated NCCL's broadcast: the root's known bytes, handed to the other ranks.
// 1 when all `n` bytes at `src` are known (copied into `out`), else 0.
extern "C" __attribute__((visibility("default"))) int fakecuda_shadow_read(const void* src,
                                                                          size_t n, void* out) {
  std::lock_guard<std::mutex> g(fkrt::g_mu);
  const char* known = fkrt::find_locked(reinterpret_cast<uintptr_t>(src), n);
  if (!known) return 0;
  memcpy(out, known, n);
  return 1;
}
// `n` bytes now known at `dst` (`data`), or, with `data` NULL, no longer known.
extern "C" __attribute__((visibility("default"))) void fakecuda_shadow_write(void* dst,
                                                                            const void* data,
                                                                            size_t n) {
  if (data)
    fkrt::shadow_h2d(dst, data, n);
  else
    fkrt::shadow_drop(dst, n);
}

// Arms (data non-NULL) or disarms (NULL) the answer to this thread's next device-to-host copy of
// exactly `n` bytes; returns how many armed answers this thread's copies have taken so far.
extern "C" __attribute__((visibility("default"))) uint64_t fakecuda_shadow_answer_next(
    const void* data, size_t n) {
  fkrt::t_armed = data != nullptr;
  if (data)
    fkrt::t_answer.assign(static_cast<const char*>(data), static_cast<const char*>(data) + n);
  return fkrt::t_answered;
}
