/*
 * cachalot.h - PyTorch's CUDA caching allocator (torch 2.15), rebuilt in Rust, as a shared
 * library PyTorch loads through torch.cuda.memory.CUDAPluggableAllocator.
 *
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *       "libcachalot_capi.so", "cachalot_malloc", "cachalot_free")
 *   torch.cuda.memory.change_current_allocator(alloc)   # before any CUDA allocation
 *
 * Environment (read once, at the first call):
 *   PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF  the configuration, as torch 2.15 reads it
 *   CACHALOT_ALLOC_CONF                          the same keys plus cachalot's own, applied on top
 *   PYTORCH_NO_CUDA_MEMORY_CACHING=1             no caching: cudaMalloc/cudaFree per request
 *   CACHALOT_DEVICE                              "cuda" (default) or "sim" (a simulated GPU;
 *                                                stream handles are then plain numbers)
 *   CACHALOT_SIM_CAPACITY                        each simulated GPU's memory, e.g. 80G (default);
 *                                                devices get disjoint address ranges, and one
 *                                                that no longer fits below 2^64 refuses to open
 *   CACHALOT_VERBOSE=1                           say on stderr what was set up
 *   CACHALOT_DEVICE_LOG=FILE                     every device memory call written to FILE (which
 *                                                must not exist) as CSV rows
 *                                                seq,op,size,ptr,handle,result,phys_used
 *
 * Every function is thread-safe and never aborts the process: failures are reported on stderr
 * and through cachalot_last_error(). Checked against the library's exported symbols by
 * crates/capi/tests/header.rs.
 */
#ifndef CACHALOT_H
#define CACHALOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A CUDA stream handle (the runtime's cudaStream_t / the driver's CUstream). */
typedef struct CUstream_st *cachalot_stream_t;

/* Allocates `size` bytes on device `device` for use on `stream`. Returns NULL for size 0 and
 * on failure; on out-of-memory torch's message goes to stderr and cachalot_last_error().
 * Only when torch's own code (libtorch*, libc10*) made the call is a failure thrown instead,
 * as c10::OutOfMemoryError / c10::Error (what torch's CUDAPluggableAllocator needs); any
 * other caller, also in a process that has loaded torch (C, C++, ctypes), gets NULL. */
void *cachalot_malloc(size_t size, int device, cachalot_stream_t stream);

/* Frees `ptr` from cachalot_malloc. `size` and `stream` are ignored (the allocator knows
 * them). NULL is a no-op; a pointer the library did not hand out is reported on stderr and
 * counted (cachalot_unknown_frees), not fatal. */
void cachalot_free(void *ptr, size_t size, int device, cachalot_stream_t stream);

/* Optional hooks, set on torch's allocator object (alloc.allocator().set_init_fn(...), ...). */

/* set_init_fn: reads the configuration now (reporting a bad one); devices open on first use. */
void cachalot_init(int device_count);

/* set_reset_fn: torch.cuda.empty_cache(); returns cached memory of every open device. */
void cachalot_reset(void);

/* set_memory_fraction_fn: torch.cuda.set_per_process_memory_fraction(fraction, device). */
void cachalot_set_memory_fraction(double fraction, int device);

/* set_record_stream_fn: Tensor.record_stream(stream); `ptr` is also used on `stream`. NULL (an
 * empty tensor) is a no-op, as in torch. */
void cachalot_record_stream(void *ptr, cachalot_stream_t stream);

/* Which c10 stream `stream` is (torch.cuda.Stream().stream_id on `device`): torch walks the
 * outstanding record_stream events in a table keyed by that identity, which decides the order
 * in which completed events give blocks back. Unregistered handles count as external streams
 * (the default stream's identity is right without it). cachalot.torch registers each stream. */
void cachalot_register_stream(cachalot_stream_t stream, int device, int64_t stream_id);

/* Private pools (CUDA-graph capture, torch.cuda.MemPool): torch's pluggable hooks
 * set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and set_release_pool take C++
 * std::function objects, so these take the MempoolId_t as its two members and the stream
 * filter as a C function (NULL: every stream) with a context pointer that must stay valid, and
 * the filter callable from any thread, until the pool is ended. A C++ wrapper for torch:
 *   a->set_release_pool([](int d, c10::cuda::MempoolId_t id) {
 *       cachalot_release_pool(d, id.first, id.second); });
 * Each returns 0, or -1 with torch's message in cachalot_last_error(). */
typedef int (*cachalot_stream_filter_t)(void *ctx, cachalot_stream_t stream);
int cachalot_begin_allocate_to_pool(int device, uint64_t first, uint64_t second,
                                    cachalot_stream_filter_t filter, void *ctx);
int cachalot_end_allocate_to_pool(int device, uint64_t first, uint64_t second);
int cachalot_release_pool(int device, uint64_t first, uint64_t second);
/* createOrIncrefPool: a MemPool object's reference. */
int cachalot_create_or_incref_pool(int device, uint64_t first, uint64_t second);
/* emptyCache(pool): the pool's free segments, if its count is 0; (0, 0) is the whole cache. */
int cachalot_empty_cache_pool(int device, uint64_t first, uint64_t second);
/* getPoolUseCount, or -1 if there is no such pool. */
int cachalot_pool_use_count(int device, uint64_t first, uint64_t second);

/* cachalot as the allocator OF a torch.cuda.MemPool, with torch's own allocator as the
 * process's (torch then rounds, caches and splits on top):
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *       "libcachalot_capi.so", "cachalot_segment_malloc", "cachalot_segment_free")
 *   pool = torch.cuda.MemPool(alloc.allocator())
 * Each call is one device allocation of exactly `size` bytes (a segment of torch's pool), freed
 * at once by cachalot_segment_free; nothing is cached or split here, and these segments are
 * apart from cachalot_malloc's. Out of memory returns NULL (torch frees its cache, retries and
 * raises its own OutOfMemoryError); any other failure raises RuntimeError when torch's own
 * code made the call and is NULL for any other caller, with the reason in
 * cachalot_last_error(). A pointer it did not hand out is reported and counted
 * (cachalot_unknown_frees), not fatal. */
void *cachalot_segment_malloc(size_t size, int device, cachalot_stream_t stream);
void cachalot_segment_free(void *ptr, size_t size, int device, cachalot_stream_t stream);
/* What torch holds from cachalot_segment_malloc on `device`, as cachalot_memory_stats_json's
 * keys: each live segment is one allocation and one segment of its size (small pool if at most
 * 2 MiB), so reserved_bytes = allocated_bytes = the bytes torch holds. */
const char *cachalot_segment_stats_json(int device);
/* Its peaks become the current values. */
void cachalot_segment_reset_peak_stats(int device);

/* What torch's pluggable interface cannot give. Returned strings stay valid until the same
 * thread's next call of a function returning a string; NULL on failure. */

/* torch.cuda.memory_stats(device) as a JSON object with torch's flat keys, e.g.
 * {"active.all.allocated": 3, ..., "allocated_bytes.all.current": 1024, ...}. */
const char *cachalot_memory_stats_json(int device);

/* torch.cuda.memory_summary(device): torch's table. */
const char *cachalot_memory_summary(int device);

/* torch.cuda.memory._record_memory_history(max_entries=...) on every device, now and later;
 * 0 stops and clears it. Returns 0, or -1 if a backend cannot record (cudaMallocAsync). */
int cachalot_record_history(size_t max_entries);

/* torch.cuda.memory._dump_snapshot(path): a pickle of every open device's segments and
 * history, for https://pytorch.org/memory_viz. Returns 0; -1 bad path or write error; -2 a
 * backend that keeps no blocks (cudaMallocAsync, no caching); -3 the library could not start. */
int cachalot_dump_snapshot(const char *path);

/* torch.cuda.reset_peak_memory_stats(device). */
void cachalot_reset_peak_stats(int device);

/* torch.cuda.reset_accumulated_memory_stats(device). */
void cachalot_reset_accumulated_stats(int device);

/* Frees of pointers the library did not hand out, reported and ignored so far. */
uint64_t cachalot_unknown_frees(void);

/* The last error reported on the calling thread ("" if none). */
const char *cachalot_last_error(void);

/* "native", "cudaMallocAsync" or "uncached" (a static string); NULL if the library could not
 * start (see cachalot_last_error). */
const char *cachalot_backend(void);

/* "cuda" or "sim": where memory comes from (CACHALOT_DEVICE, read when the library starts,
 * which this call does); NULL if the library could not start. A static string. */
const char *cachalot_device_kind(void);

#ifdef __cplusplus
}
#endif

#endif /* CACHALOT_H */
