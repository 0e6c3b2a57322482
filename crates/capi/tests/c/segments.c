/* cachalot as the allocator of a torch.cuda.MemPool, through the C library on the simulated
 * device (64 MiB): the segments torch would ask for, what the statistics say torch holds, out
 * of memory, misuse, and that these segments are apart from cachalot_malloc's. Prints
 * "key value" lines that tests/segments.rs checks. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cachalot.h"
#include "stats_json.h"

static long long seg(const char *key) { return stat_of(cachalot_segment_stats_json(0), key); }
static long long caching(const char *key) { return stat_of(cachalot_memory_stats_json(0), key); }

int main(void) {
  const uintptr_t MiB = 1 << 20;
  printf("kind %s\n", cachalot_device_kind());
  /* torch's small-pool segment and a large one */
  char *small = cachalot_segment_malloc(2 * MiB, 0, NULL);
  char *large = cachalot_segment_malloc(20 * MiB, 0, NULL);
  printf("got_both %d\n", small != NULL && large != NULL && small != large);
  printf("reserved %lld\n", seg("reserved_bytes.all.current"));
  printf("allocated %lld\n", seg("allocated_bytes.all.current"));
  printf("reserved_small %lld\n", seg("reserved_bytes.small_pool.current"));
  printf("reserved_large %lld\n", seg("reserved_bytes.large_pool.current"));
  printf("segments %lld\n", seg("segment.all.current"));
  printf("inactive_split_bytes %lld\n", seg("inactive_split_bytes.all.current"));
  printf("device_allocs %lld\n", seg("num_device_alloc"));
  /* the caching allocator is a different one, with different addresses */
  char *x = cachalot_malloc(1000, 0, NULL);
  int inside = (x >= small && x < small + 2 * MiB) || (x >= large && x < large + 20 * MiB);
  printf("caching_apart %d\n", x != NULL && !inside);
  printf("caching_reserved %lld\n", caching("reserved_bytes.all.current"));
  cachalot_free(x, 0, 0, NULL);
  /* a segment that does not fit: NULL, nothing changed */
  void *big = cachalot_segment_malloc(64 * MiB, 0, NULL);
  printf("oom_null %d\n", big == NULL);
  printf("oom_error %s\n", cachalot_last_error());
  printf("reserved_after_oom %lld\n", seg("reserved_bytes.all.current"));
  /* given back at once */
  cachalot_segment_free(large, 20 * MiB, 0, NULL);
  printf("reserved_after_free %lld\n", seg("reserved_bytes.all.current"));
  void *again = cachalot_segment_malloc(40 * MiB, 0, NULL);
  printf("reuses_freed_memory %d\n", again != NULL);
  cachalot_segment_free(again, 40 * MiB, 0, NULL);
  /* misuse: a second free, a pointer from the other allocator, a bad device */
  cachalot_segment_free(large, 20 * MiB, 0, NULL);
  cachalot_segment_free(small + 4096, 0, 0, NULL);
  cachalot_segment_free(NULL, 0, 0, NULL);
  printf("unknown_frees %llu\n", (unsigned long long)cachalot_unknown_frees());
  printf("bad_device_null %d\n", cachalot_segment_malloc(MiB, -1, NULL) == NULL);
  printf("bad_device_error %s\n", cachalot_last_error());
  printf("bad_device_stats_null %d\n", cachalot_segment_stats_json(64) == NULL);
  cachalot_segment_free(small, 2 * MiB, 0, NULL);
  printf("reserved_end %lld\n", seg("reserved_bytes.all.current"));
  printf("peak %lld\n", seg("reserved_bytes.all.peak"));
  printf("device_frees %lld\n", seg("num_device_free"));
  cachalot_segment_reset_peak_stats(0);
  printf("peak_after_reset %lld\n", seg("reserved_bytes.all.peak"));
  return 0;
}
