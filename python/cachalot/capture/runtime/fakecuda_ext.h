/* Extra (non-CUDA) API exported by the fake libcudart.so.13.
 * Used by the oracle to observe device-level events without a log file.
 * These symbols are NOT part of the real CUDA runtime. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fakecuda_event {
  uint64_t seq;        /* 1-based order of device-level events */
  const char* op;      /* cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync,
                          cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap,
                          cuMemAddressReserve, cuMemAddressFree */
  uint64_t size;       /* bytes requested (map/unmap: bytes of the VA range) */
  uint64_t ptr;        /* device address (0 for cuMemCreate/Release) */
  uint64_t handle;     /* physical handle id for cuMem*; 0 otherwise */
  int result;          /* 0 = success, else the cudaError_t / CUresult returned */
  uint64_t phys_used;  /* physical bytes in use on the fake device after the op */
} fakecuda_event;

typedef struct fakecuda_counters {
  uint64_t capacity;           /* FAKE_CUDA_CAPACITY */
  uint64_t phys_used;          /* bytes currently backed (cudaMalloc + cuMemCreate) */
  uint64_t phys_peak;          /* high-water mark of phys_used */
  uint64_t n_malloc;           /* successful cudaMalloc calls */
  uint64_t n_malloc_fail;      /* cudaMalloc calls that returned cudaErrorMemoryAllocation */
  uint64_t n_free;             /* successful cudaFree calls */
  uint64_t n_malloc_async;     /* cudaMallocAsync successes */
  uint64_t n_free_async;
  uint64_t n_mem_create;       /* successful cuMemCreate */
  uint64_t n_mem_create_fail;  /* cuMemCreate -> CUDA_ERROR_OUT_OF_MEMORY */
  uint64_t n_mem_release;
  uint64_t n_mem_map;
  uint64_t n_mem_unmap;
  uint64_t n_addr_reserve;
  uint64_t n_addr_free;
  uint64_t va_reserved;        /* bytes of VA currently reserved by cuMemAddressReserve */
  uint64_t n_unimplemented;    /* calls to stubbed (unimplemented) runtime functions */
  /* added by tools/fakegpu: */
  uint64_t n_kernel_launches;  /* cudaLaunchKernel / __cudaLaunchKernel / cudaLaunchKernelExC (no-ops) */
  uint64_t n_d2h;              /* device-to-host copies (host buffer zero-filled): host reads of device data */
  uint64_t d2h_bytes;
  uint64_t n_h2d;              /* host-to-device copies (dropped) */
  uint64_t h2d_bytes;
} fakecuda_counters;

typedef void (*fakecuda_event_cb)(const fakecuda_event* ev, void* user);

/* Register a callback invoked (under the fake's lock) for every device-level event. */
void fakecuda_set_event_callback(fakecuda_event_cb cb, void* user);
void fakecuda_get_counters(fakecuda_counters* out);
/* Called (outside the fake's lock) after every device-to-host copy, with its size. */
void fakecuda_set_d2h_callback(void (*cb)(uint64_t bytes, void* user), void* user);
/* Shadow bytes (cudart_shadow.cpp): `n` bytes now known at device address `dst` (`data`), or,
 * with `data` NULL, no longer known; later device-to-host copies of them return them. */
void fakecuda_shadow_write(void* dst, const void* data, size_t n);
/* Arms (`data` non-NULL) or disarms the answer to the calling thread's next device-to-host copy
 * of exactly `n` bytes; returns how many armed answers that thread's copies have taken. */
uint64_t fakecuda_shadow_answer_next(const void* data, size_t n);
/* Driver-API implementation for `name` (e.g. "cuMemCreate"), or NULL. */
void* fakecuda_driver_symbol(const char* name);
/* Returns the version string of the fake. */
const char* fakecuda_version(void);

#ifdef __cplusplus
}
#endif
