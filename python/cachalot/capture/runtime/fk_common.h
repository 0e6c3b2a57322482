// fk_common.h -- small helpers shared by the fake NVIDIA libraries
// (libcublas, libcublasLt, libcudnn). Header-only; every library gets its own
// private copy (everything here has internal linkage / hidden visibility, and
// the version scripts export only the API names).
//
//  * FAKE_CUDA_VERBOSE=1     log the first call of every stubbed entry point
//  * FAKE_GPU_CALLSTATS=FILE at exit, append "lib<TAB>function<TAB>calls" for
//                            every entry point that was called (O_APPEND, so
//                            several libraries can share one file)
//
// Provenance: copied unchanged from the cachalot team's shared/fakegpu for
// `cachalot capture`, which compiles it at first use (capture/build.py).
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#ifndef FK_LIB
#error "define FK_LIB before including fk_common.h"
#endif

namespace fk {

struct Counter {
  const char* name;
  bool stub;
  std::atomic<uint64_t> n{0};
  Counter(const char* nm, bool s) : name(nm), stub(s) {}
};

inline bool verbose() {
  static int v = [] {
    const char* e = getenv("FAKE_CUDA_VERBOSE");
    return (e && *e && strcmp(e, "0") != 0) ? 1 : 0;
  }();
  return v != 0;
}

struct Registry {
  std::mutex mu;
  std::vector<Counter*> all;
  ~Registry() {
    const char* path = getenv("FAKE_GPU_CALLSTATS");
    if (!path || !*path) return;
    std::string out;
    for (Counter* c : all) {
      uint64_t n = c->n.load();
      if (!n) continue;
      char line[512];
      snprintf(line, sizeof line, "%s\t%s\t%llu\t%s\n", FK_LIB, c->name, (unsigned long long)n,
               c->stub ? "stub" : "impl");
      out += line;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ssize_t w = write(fd, out.data(), out.size());
      (void)w;
      close(fd);
    }
  }
};

inline Registry& registry() {
  static Registry r;
  return r;
}

inline Counter* counter(const char* name, bool stub) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  Counter* c = new Counter(name, stub);
  r.all.push_back(c);
  return c;
}

inline void count(Counter* c) {
  if (c->n.fetch_add(1, std::memory_order_relaxed) == 0 && c->stub && verbose())
    fprintf(stderr, "[fake_%s] stub called: %s -> success, no effect\n", FK_LIB, c->name);
}

}  // namespace fk

// Count one call of the enclosing exported function.
#define FK_CALL(name)                                    \
  do {                                                   \
    static fk::Counter* fk_c_ = fk::counter(name, false); \
    fk::count(fk_c_);                                    \
  } while (0)
#define FK_TRACE() FK_CALL(__func__)
