/* A fake CUDA driver (libcuda.so) with the 40 entry points CudaDevice calls, so that its FFI
 * (argument passing, structure layouts, result codes, context handling) is tested on machines
 * without a GPU. Built by tests/fake_driver.rs; "device memory" is host memory.
 *
 * It is strict where a real driver is: memory, event, stream and pool calls need the primary
 * context current on the calling thread (else CUDA_ERROR_INVALID_CONTEXT); VMM structures
 * must name device 0 with read/write access; pool attributes must carry the values torch
 * sets. It aborts on a context push/pop imbalance. The pool keeps freed memory reserved until
 * trimmed, like the real one with torch's release threshold. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent, *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct { unsigned type; int id; } Location;
typedef struct {
  unsigned type, handle_types;
  Location location;
  void *win32;
  unsigned char compression, rdma;
  unsigned short usage;
  unsigned char reserved[4];
} AllocProp;
typedef struct { Location location; unsigned flags; } AccessDesc;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
       INVALID_DEVICE = 101, INVALID_CONTEXT = 201, NOT_FOUND = 500, NOT_READY = 600 };

#define MIB (1ull << 20)
#define CAPACITY (1ull << 30)
#define MAX 4096
static CUcontext const PRIMARY = (CUcontext)0xC0C0;
static CUmemoryPool const POOL = (CUmemoryPool)0xB001;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inited, retained;
static unsigned long long used;

enum Kind { FREE_SLOT, MALLOC, ASYNC, RESERVE };
static struct Range { enum Kind kind; CUdeviceptr ptr; size_t size; } ranges[MAX];
static struct Handle { size_t size; int mapped, released, live; CUdeviceptr at; } handles[MAX];
static unsigned long long next_handle = 1;
static unsigned long long pool_used, pool_reserved, pool_used_high, pool_reserved_high;
static int threshold_ok, reuse_flags;

static __thread CUcontext stack[4];
static __thread int depth;

#define LOCKED(...) do { pthread_mutex_lock(&mu); __VA_ARGS__; pthread_mutex_unlock(&mu); } while (0)

static int have_ctx(void) { return depth > 0 && stack[depth - 1] == PRIMARY; }

static struct Range *find(CUdeviceptr p, enum Kind kind) {
  for (int i = 0; i < MAX; i++)
    if (ranges[i].kind == kind && ranges[i].ptr == p) return &ranges[i];
  return NULL;
}

static struct Range *add(enum Kind kind, size_t size) {
  for (int i = 0; i < MAX; i++)
    if (ranges[i].kind == FREE_SLOT) {
      void *mem = calloc(1, size ? size : 1);
      if (!mem) return NULL;
      ranges[i] = (struct Range){kind, (CUdeviceptr)(uintptr_t)mem, size};
      return &ranges[i];
    }
  return NULL;
}

static void drop_range(struct Range *r) {
  free((void *)(uintptr_t)r->ptr);
  r->kind = FREE_SLOT;
}

static int prop_ok(const AllocProp *p) {
  return p && p->type == 1 && p->handle_types == 0 && p->location.type == 1 &&
         p->location.id == 0 && p->win32 == NULL;
}

CUresult cuGetErrorName(CUresult r, const char **s) {
  switch (r) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return OK;
    case INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; return OK;
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
    case NOT_READY: *s = "CUDA_ERROR_NOT_READY"; return OK;
    default: return INVALID_VALUE;
  }
}

CUresult cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  if (getenv("FAKE_CUDA_NO_DEVICE")) return NO_DEVICE;
  inited = 1;
  return OK;
}
CUresult cuDeviceGetCount(int *n) { if (!inited) return NOT_INITIALIZED; *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0) return INVALID_DEVICE;
  *d = 0;
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  if (d != 0) return INVALID_DEVICE;
  *v = (attr == 102 || attr == 115) ? 1 : 0; /* VMM, memory pools */
  return OK;
}
/* Built with -DFAKE_CUDA_WITHOUT_NAME, the driver lacks this entry point (a broken driver). */
#ifndef FAKE_CUDA_WITHOUT_NAME
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (d != 0 || len < 1) return INVALID_VALUE;
  snprintf(name, (size_t)len, "Fake GPU (cachalot test driver)");
  return OK;
}
#endif
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (d != 0) return INVALID_DEVICE;
  LOCKED(retained++);
  *c = PRIMARY;
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (d != 0 || retained == 0) return INVALID_VALUE;
  LOCKED(retained--);
  return OK;
}
CUresult cuCtxGetCurrent(CUcontext *c) { *c = depth ? stack[depth - 1] : NULL; return OK; }
CUresult cuCtxPushCurrent_v2(CUcontext c) {
  if (c != PRIMARY) return INVALID_CONTEXT;
  if (depth > 0 && stack[depth - 1] == PRIMARY) {
    fprintf(stderr, "fake libcuda: pushed the context that was already current\n");
    abort();
  }
  if (depth == 4) abort();
  stack[depth++] = c;
  return OK;
}
CUresult cuCtxPopCurrent_v2(CUcontext *c) {
  if (depth == 0) {
    fprintf(stderr, "fake libcuda: pop with no context pushed\n");
    abort();
  }
  *c = stack[--depth];
  return OK;
}
CUresult cuCtxSynchronize(void) { return have_ctx() ? OK : INVALID_CONTEXT; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = OK;
  LOCKED({
    struct Range *g = NULL;
    if (used + size > CAPACITY || !(g = add(MALLOC, size))) r = OUT_OF_MEMORY;
    else { used += size; *p = g->ptr; }
  });
  return r;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = OK;
  LOCKED({
    struct Range *g = find(p, MALLOC);
    if (!g) r = INVALID_VALUE;
    else { used -= g->size; drop_range(g); }
  });
  return r;
}
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
  if (!have_ctx()) return INVALID_CONTEXT;
  LOCKED({ *free_ = CAPACITY - used; *total = CAPACITY; });
  return OK;
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = NOT_FOUND;
  LOCKED(for (int i = 0; i < MAX; i++) {
    struct Range *g = &ranges[i];
    if (g->kind != FREE_SLOT && p >= g->ptr && p < g->ptr + g->size) {
      *base = g->ptr; *size = g->size; r = OK; break;
    }
  });
  return r;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  if (!have_ctx()) return INVALID_CONTEXT;
  memcpy((void *)(uintptr_t)dst, src, n);
  return OK;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  if (!have_ctx()) return INVALID_CONTEXT;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return OK;
}

/* Events: a recorded event is "not ready" at its first query. */
typedef struct { int pending; } Event;
CUresult cuEventCreate(CUevent *e, unsigned flags) {
  if (!have_ctx()) return INVALID_CONTEXT;
  if (flags != 2) return INVALID_VALUE; /* CU_EVENT_DISABLE_TIMING */
  *e = calloc(1, sizeof(Event));
  return OK;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  if (!have_ctx()) return INVALID_CONTEXT;
  if (!e) return INVALID_VALUE;
  ((Event *)e)->pending = 1;
  return OK;
}
CUresult cuEventQuery(CUevent e) {
  if (!have_ctx()) return INVALID_CONTEXT;
  Event *ev = e;
  if (ev->pending) { ev->pending = 0; return NOT_READY; }
  return OK;
}
CUresult cuEventSynchronize(CUevent e) {
  if (!have_ctx()) return INVALID_CONTEXT;
  ((Event *)e)->pending = 0;
  return OK;
}
CUresult cuEventDestroy_v2(CUevent e) {
  if (!have_ctx()) return INVALID_CONTEXT;
  free(e);
  return OK;
}
CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  if (!have_ctx()) return INVALID_CONTEXT;
  if (flags != 1) return INVALID_VALUE; /* CU_STREAM_NON_BLOCKING */
  *s = calloc(1, 16);
  return OK;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  if (!have_ctx()) return INVALID_CONTEXT;
  free(s);
  return OK;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  if (!have_ctx()) return INVALID_CONTEXT;
  return (s && e && flags == 0) ? OK : INVALID_VALUE;
}
CUresult cuStreamSynchronize(CUstream s) { (void)s; return have_ctx() ? OK : INVALID_CONTEXT; }

/* Virtual memory. */
CUresult cuMemGetAllocationGranularity(size_t *g, const AllocProp *p, int option) {
  if (!prop_ok(p) || option != 0) return INVALID_VALUE;
  *g = 2 * MIB;
  return OK;
}
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags) {
  if (!have_ctx()) return INVALID_CONTEXT;
  if (size == 0 || size % (2 * MIB) || align || addr || flags) return INVALID_VALUE;
  CUresult r = OK;
  LOCKED({
    struct Range *g = add(RESERVE, size);
    if (!g) r = OUT_OF_MEMORY; else *p = g->ptr;
  });
  return r;
}
CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = OK;
  LOCKED({
    struct Range *g = find(p, RESERVE);
    if (!g || g->size != size) r = INVALID_VALUE; else drop_range(g);
  });
  return r;
}
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const AllocProp *p,
                     unsigned long long flags) {
  if (!have_ctx()) return INVALID_CONTEXT;
  if (!prop_ok(p) || flags || size == 0 || size % (2 * MIB)) return INVALID_VALUE;
  CUresult r = OK;
  LOCKED({
    if (used + size > CAPACITY || next_handle >= MAX) r = OUT_OF_MEMORY;
    else {
      used += size;
      handles[next_handle] = (struct Handle){size, 0, 0, 1, 0};
      *h = next_handle++;
    }
  });
  return r;
}
static void maybe_uncharge(struct Handle *x) {
  if (x->released && !x->mapped && x->live) { used -= x->size; x->live = 0; }
}
CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = OK;
  LOCKED({
    if (h == 0 || h >= MAX || !handles[h].live || handles[h].released) r = INVALID_VALUE;
    else { handles[h].released = 1; maybe_uncharge(&handles[h]); }
  });
  return r;
}
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = OK;
  LOCKED({
    int inside = 0;
    for (int i = 0; i < MAX; i++)
      if (ranges[i].kind == RESERVE && p >= ranges[i].ptr &&
          p + size <= ranges[i].ptr + ranges[i].size) inside = 1;
    if (!inside || offset || flags || h == 0 || h >= MAX || !handles[h].live ||
        handles[h].mapped || handles[h].size != size) r = INVALID_VALUE;
    else { handles[h].mapped = 1; handles[h].at = p; }
  });
  return r;
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const AccessDesc *d, size_t count) {
  if (!have_ctx()) return INVALID_CONTEXT;
  if (count != 1 || !d || d->location.type != 1 || d->location.id != 0 || d->flags != 3)
    return INVALID_VALUE;
  CUresult r = INVALID_VALUE;
  LOCKED(for (unsigned long long h = 1; h < next_handle; h++)
    if (handles[h].mapped && handles[h].at == p && handles[h].size == size) r = OK);
  return r;
}
CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = INVALID_VALUE;
  LOCKED(for (unsigned long long h = 1; h < next_handle; h++)
    if (handles[h].mapped && handles[h].at == p && handles[h].size == size) {
      handles[h].mapped = 0; maybe_uncharge(&handles[h]); r = OK;
    });
  return r;
}

/* The default pool. */
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
  if (d != 0) return INVALID_DEVICE;
  *pool = POOL;
  return OK;
}
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *v) {
  if (pool != POOL || !v) return INVALID_VALUE;
  CUresult r = OK;
  LOCKED(switch (attr) {
    case 1: case 2: case 3:  /* reuse policies: torch enables them */
      if (*(int *)v != 1) r = INVALID_VALUE; else reuse_flags |= 1 << attr;
      break;
    case 4:  /* release threshold: torch raises it to the maximum */
      if (*(unsigned long long *)v != UINT64_MAX) r = INVALID_VALUE; else threshold_ok = 1;
      break;
    case 6: if (*(unsigned long long *)v) r = INVALID_VALUE; else pool_reserved_high = pool_reserved; break;
    case 8: if (*(unsigned long long *)v) r = INVALID_VALUE; else pool_used_high = pool_used; break;
    default: r = INVALID_VALUE;
  });
  return r;
}
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *v) {
  if (pool != POOL || !v) return INVALID_VALUE;
  unsigned long long *out = v;
  CUresult r = OK;
  LOCKED(switch (attr) {
    case 5: *out = pool_reserved; break;
    case 6: *out = pool_reserved_high; break;
    case 7: *out = pool_used; break;
    case 8: *out = pool_used_high; break;
    default: r = INVALID_VALUE;
  });
  return r;
}
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (!have_ctx()) return INVALID_CONTEXT;
  if (pool != POOL) return INVALID_VALUE;
  LOCKED({
    unsigned long long cached = pool_reserved - pool_used;
    if (cached > keep) { used -= cached - keep; pool_reserved = pool_used + keep; }
  });
  return OK;
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) {
  (void)s;
  if (!have_ctx()) return INVALID_CONTEXT;
  /* torch's settings must be in place before the first allocation. */
  if (pool != POOL || !threshold_ok || reuse_flags != 0xE) return INVALID_VALUE;
  CUresult r = OK;
  LOCKED({
    unsigned long long cached = pool_reserved - pool_used;
    unsigned long long grow = size > cached ? size - cached : 0;
    struct Range *g = NULL;
    if (used + grow > CAPACITY || !(g = add(ASYNC, size))) r = OUT_OF_MEMORY;
    else {
      used += grow; pool_reserved += grow; pool_used += size; *p = g->ptr;
      if (pool_used > pool_used_high) pool_used_high = pool_used;
      if (pool_reserved > pool_reserved_high) pool_reserved_high = pool_reserved;
    }
  });
  return r;
}
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  (void)s;
  if (!have_ctx()) return INVALID_CONTEXT;
  CUresult r = OK;
  LOCKED({
    struct Range *g = find(p, ASYNC);
    if (!g) r = INVALID_VALUE; else { pool_used -= g->size; drop_range(g); }
  });
  return r;
}
