/* Private pools through the C library on the simulated device: a MemPool's life as torch's
 * Python API drives it (MemPool(), use_mem_pool, empty_cache, del pool), a capture-style pool
 * that takes one stream only, and misuse. Prints "key value" lines that tests/pools.rs checks. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cachalot.h"
#include "stats_json.h"

static cachalot_stream_t stream_of(uintptr_t id) { return (cachalot_stream_t)id; }

static int only_stream_7(void *ctx, cachalot_stream_t s) {
  (void)ctx;
  return s == stream_of(7);
}

static long long stat(const char *key) { return stat_of(cachalot_memory_stats_json(0), key); }

int main(void) {
  /* pool = MemPool(); with use_mem_pool(pool): x = 5 MiB */
  printf("create %d\n", cachalot_create_or_incref_pool(0, 0, 1));
  printf("begin %d\n", cachalot_begin_allocate_to_pool(0, 0, 1, NULL, NULL));
  void *x = cachalot_malloc(5 << 20, 0, stream_of(0));
  printf("end %d\n", cachalot_end_allocate_to_pool(0, 0, 1));
  printf("release_exit %d\n", cachalot_release_pool(0, 0, 1));
  printf("count_after_with %d\n", cachalot_pool_use_count(0, 0, 1));
  cachalot_free(x, 0, 0, stream_of(0));
  /* outside the pool: its free block is not reused */
  void *y = cachalot_malloc(5 << 20, 0, stream_of(0));
  printf("outside_reuses_pool_block %d\n", y == x);
  cachalot_free(y, 0, 0, stream_of(0));
  printf("reserved_before_empty %lld\n", stat("reserved_bytes.all.current"));
  cachalot_reset(); /* torch.cuda.empty_cache(): the pool is still referenced */
  printf("reserved_after_empty %lld\n", stat("reserved_bytes.all.current"));
  /* del pool: releasePool + emptyCache(pool) */
  printf("release_del %d\n", cachalot_release_pool(0, 0, 1));
  printf("empty_pool %d\n", cachalot_empty_cache_pool(0, 0, 1));
  printf("reserved_after_del %lld\n", stat("reserved_bytes.all.current"));
  printf("count_after_del %d\n", cachalot_pool_use_count(0, 0, 1));
  /* a graph pool (1, 0) capturing stream 7 only */
  printf("graph_begin %d\n", cachalot_begin_allocate_to_pool(0, 1, 0, only_stream_7, NULL));
  void *g = cachalot_malloc(1000, 0, stream_of(7));
  void *d = cachalot_malloc(1000, 0, stream_of(8));
  printf("graph_end %d\n", cachalot_end_allocate_to_pool(0, 1, 0));
  printf("segments_two_pools %lld\n", stat("segment.all.current"));
  cachalot_free(g, 0, 0, stream_of(7));
  cachalot_free(d, 0, 0, stream_of(8));
  /* misuse: torch's messages, nothing aborts */
  printf("end_again %d\n", cachalot_end_allocate_to_pool(0, 1, 0));
  printf("end_again_error %s\n", cachalot_last_error());
  printf("release_unknown %d\n", cachalot_release_pool(0, 0, 99));
  return 0;
}
