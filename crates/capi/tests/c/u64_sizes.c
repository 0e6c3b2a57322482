/* Random calls of the exported functions with sizes across the whole size_t range (SIZE_MAX,
 * the band 2^64 - 2^25 .. 2^64 - 2^22 where torch's own rounding starts to wrap, and the rest
 * of the range), on the simulated device, checking after every call:
 *
 *   - a successful cachalot_malloc(n) is a 512-byte aligned range [p, p + n) that does not
 *     wrap past 2^64 and overlaps no live allocation of any device;
 *   - a failed one returns NULL, sets cachalot_last_error() (torch's out-of-memory message,
 *     or a CUDA error where torch raises one), changes nothing that is allocated (allocation,
 *     allocated bytes: every current, peak and lifetime count; active blocks and requested
 *     bytes only lose those whose stream events completed, as at the start of every malloc) and
 *     does not grow what is reserved. Out of memory still counts, and may flush the cache
 *     first, as torch's allocator does;
 *   - a call that fails for any other reason (size 0, a pointer that is not an allocation,
 *     a fraction outside [0, 1]) leaves torch's statistics exactly as they were;
 *   - at the end, with everything freed and the cache emptied, nothing is allocated and
 *     (caching backend) nothing is reserved.
 *
 * Devices that cannot be laid out below 2^64 beside the ones before (huge capacities) must
 * refuse to open with that reason; the others are used.
 *
 * usage: u64_sizes SEED CALLS DEVICES
 * The configuration comes from the environment (PYTORCH_CUDA_ALLOC_CONF, ...,
 * CACHALOT_SIM_CAPACITY), set by tests/u64_sizes.rs. Prints "SUMMARY ..." and exits 0 when
 * every check held; otherwise "FAILED ..." with the call number, and exits 1. */
#include "cachalot.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((uint64_t)1 << 20)
#define MAX_LIVE 256
#define MAX_DEVICES 4

static uint64_t rng_state;
static uint64_t next(void) { /* SplitMix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t call_no;
#define CHECK(c, ...)                                                          \
  do {                                                                         \
    if (!(c)) {                                                                \
      printf("FAILED call %" PRIu64 " (u64_sizes.c:%d: %s): ", call_no,        \
             __LINE__, #c);                                                    \
      printf(__VA_ARGS__);                                                     \
      printf("\nlast error: %s\n", cachalot_last_error());                     \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* A request size, over the whole range with weight where the arithmetic is delicate. */
static size_t random_size(void) {
  uint64_t r = next();
  switch (next() % 16) {
  case 0: case 1: case 2: case 3: return r % (2 * MIB);
  case 4: case 5: case 6: return r % (400 * MIB);
  case 7: return r % ((uint64_t)8 << 30);
  case 8: return r % ((uint64_t)1 << 42);
  case 9: return r >> (next() % 64); /* log-uniform over all of u64 */
  case 10: return SIZE_MAX;
  case 11: return SIZE_MAX - r % (64 * MIB); /* 2^64 - 2^26 .. 2^64 - 1 */
  case 12: { /* at a power-of-two distance from the top, +- 4 KiB */
    static const int shifts[] = {9, 20, 21, 22, 23, 24, 25, 26, 40, 61, 62, 63};
    uint64_t below = (uint64_t)1 << shifts[r % 12];
    return (size_t)(0 - below) + (size_t)(next() % 8193) - 4096;
  }
  case 13: return r;
  default: return r % (4 * MIB) + 1;
  }
}

struct live { uintptr_t ptr; size_t size; int device; };
static struct live live[MAX_LIVE];
static int n_live;

static cachalot_stream_t stream_of(uint64_t r) { return (cachalot_stream_t)(uintptr_t)(r % 4 * 0x10); }

/* torch's statistics of `device` as a copy of the JSON text. */
static char *stats(int device) {
  const char *s = cachalot_memory_stats_json(device);
  CHECK(s != NULL, "no statistics for device %d", device);
  size_t n = strlen(s) + 1;
  char *copy = malloc(n);
  CHECK(copy != NULL, "out of host memory");
  return memcpy(copy, s, n);
}

/* The value of a key in a stats JSON text. */
static long long stat(const char *json, const char *key) {
  char pattern[128];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(json, pattern);
  CHECK(at != NULL, "no key %s in %s", key, json);
  return strtoll(at + strlen(pattern), NULL, 10);
}

/* The statistics a failed allocation must leave as they were. */
static const char *const held[] = {"allocation", "allocated_bytes"};
static const char *const kinds[] = {"current", "peak", "allocated", "freed"};
/* ... and those it may only lower: blocks whose recorded streams are done become free. */
static const char *const settled[] = {"active", "active_bytes", "requested_bytes"};

static void check_held(const char *before, const char *after, size_t size) {
  char key[128];
  for (size_t h = 0; h < sizeof held / sizeof *held; h++)
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
      snprintf(key, sizeof key, "%s.all.%s", held[h], kinds[k]);
      CHECK(stat(before, key) == stat(after, key),
            "failed malloc(%zu) changed %s from %lld to %lld", size, key, stat(before, key),
            stat(after, key));
    }
  for (size_t h = 0; h < sizeof settled / sizeof *settled; h++) {
    snprintf(key, sizeof key, "%s.all.current", settled[h]);
    CHECK(stat(after, key) <= stat(before, key), "failed malloc(%zu) raised %s", size, key);
    snprintf(key, sizeof key, "%s.all.peak", settled[h]);
    CHECK(stat(after, key) == stat(before, key), "failed malloc(%zu) changed %s", size, key);
    snprintf(key, sizeof key, "%s.all.allocated", settled[h]);
    CHECK(stat(after, key) == stat(before, key), "failed malloc(%zu) changed %s", size, key);
  }
  CHECK(stat(after, "reserved_bytes.all.current") <= stat(before, "reserved_bytes.all.current"),
        "failed malloc(%zu) reserved more memory", size);
}

static int overlaps(uintptr_t p, size_t n, const struct live *l) {
  /* [p, p + n) and [l->ptr, l->ptr + l->size), neither wrapping */
  return p < l->ptr + l->size && l->ptr < p + n;
}

/* Sets the last error to a known text (a failed record_stream changes nothing), so that a
 * failure can be seen to have set its own. */
static const char *sentinel(void) {
  cachalot_record_stream((void *)(uintptr_t)0x1, NULL);
  return "record_stream: 0x1 is not an allocation of this library";
}

static uint64_t ok, ooms, other_errors, zero, near_top, bogus, fractions, saturated;

static void do_malloc(int device) {
  size_t size = next() % 32 == 0 ? 0 : random_size();
  cachalot_stream_t s = stream_of(next());
  char *before = stats(device);
  const char *expect = sentinel();
  CHECK(strcmp(cachalot_last_error(), expect) == 0, "the sentinel error was not set");
  if (size >= SIZE_MAX - 64 * MIB) near_top++;
  void *p = cachalot_malloc(size, device, s);
  char *after = stats(device);
  uintptr_t a = (uintptr_t)p;
  if (size == 0) {
    zero++;
    CHECK(p == NULL, "malloc(0) gave %p", p);
    CHECK(strcmp(before, after) == 0, "malloc(0) changed the statistics");
  } else if (p == NULL) {
    const char *e = cachalot_last_error();
    CHECK(strcmp(e, expect) != 0 && *e != 0, "malloc(%zu) failed without setting the last error",
          size);
    if (strstr(e, "CUDA out of memory") != NULL || strstr(e, "(out of memory)") != NULL)
      ooms++;
    else
      other_errors++;
    check_held(before, after, size);
  } else {
    ok++;
    CHECK(a % 512 == 0, "malloc(%zu) gave %p, not 512-byte aligned", size, p);
    CHECK(size - 1 <= UINTPTR_MAX - a, "malloc(%zu) gave %p: the range wraps past 2^64", size,
          p);
    for (int i = 0; i < n_live; i++)
      CHECK(!overlaps(a, size, &live[i]),
            "malloc(%zu) on device %d gave [%#" PRIxPTR ", +%zu), overlapping [%#" PRIxPTR
            ", +%zu) of device %d",
            size, device, a, size, live[i].ptr, live[i].size, live[i].device);
    CHECK(stat(after, "allocated_bytes.all.current") >=
              stat(before, "allocated_bytes.all.current"),
          "malloc(%zu) lowered allocated bytes", size);
    if (n_live < MAX_LIVE)
      live[n_live++] = (struct live){a, size, device};
    else
      cachalot_free(p, size, device, s);
  }
  free(before);
  free(after);
}

static void do_free(void) {
  if (n_live == 0) return;
  int i = (int)(next() % (uint64_t)n_live);
  struct live l = live[i];
  live[i] = live[--n_live];
  uint64_t unknown = cachalot_unknown_frees();
  cachalot_free((void *)l.ptr, l.size, l.device, stream_of(next()));
  CHECK(cachalot_unknown_frees() == unknown, "freeing a live allocation %#" PRIxPTR
                                             " was refused", l.ptr);
}

static int is_live(uintptr_t p) {
  for (int i = 0; i < n_live; i++)
    if (live[i].ptr == p) return 1;
  return 0;
}

/* A free or record_stream of an address that is not an allocation (inside one, or nowhere):
 * refused, nothing changes. */
static void do_bogus(int device) {
  uintptr_t p = n_live > 0 ? live[next() % (uint64_t)n_live].ptr + 512 : (uintptr_t)0xdead0000;
  if (is_live(p)) p -= 511; /* inside the one before, never a block's start */
  char *before = stats(device);
  uint64_t unknown = cachalot_unknown_frees();
  if (next() % 2) {
    cachalot_free((void *)p, 0, device, NULL);
    CHECK(cachalot_unknown_frees() == unknown + 1, "freeing %#" PRIxPTR " was not refused", p);
  } else {
    const char *expect = sentinel();
    cachalot_record_stream((void *)p, stream_of(next()));
    CHECK(strcmp(cachalot_last_error(), expect) != 0 &&
              strstr(cachalot_last_error(), "not an allocation") != NULL,
          "record_stream(%#" PRIxPTR ") was not refused", p);
  }
  char *after = stats(device);
  CHECK(strcmp(before, after) == 0, "a refused call changed the statistics");
  bogus++;
  free(before);
  free(after);
}

static void do_fraction(int device) {
  double f = (double)(next() % 131) / 100.0 - 0.05; /* -0.05 .. 1.25 */
  char *before = stats(device);
  const char *expect = sentinel();
  cachalot_set_memory_fraction(f, device);
  if (f < 0.0 || f > 1.0) {
    CHECK(strcmp(cachalot_last_error(), expect) != 0 &&
              strstr(cachalot_last_error(), "fraction") != NULL,
          "fraction %g was not refused", f);
    char *after = stats(device);
    CHECK(strcmp(before, after) == 0, "a refused fraction %g changed the statistics", f);
    free(after);
    fractions++;
  }
  free(before);
}

int main(int argc, char **argv) {
  CHECK(argc == 4, "usage: u64_sizes SEED CALLS DEVICES");
  rng_state = strtoull(argv[1], NULL, 0);
  uint64_t calls = strtoull(argv[2], NULL, 0);
  int devices = atoi(argv[3]);
  CHECK(devices >= 1 && devices <= MAX_DEVICES, "1 to %d devices", MAX_DEVICES);
  const char *backend = cachalot_backend();
  CHECK(backend != NULL, "the library did not start");
  for (int d = 1; d < devices; d++)
    if (cachalot_memory_stats_json(d) == NULL) {
      CHECK(strstr(cachalot_last_error(), "below 2^64") != NULL, "device %d did not open", d);
      printf("DEVICES %d of %d fit\n", d, devices);
      devices = d;
    }
  for (call_no = 0; call_no < calls; call_no++) {
    int device = (int)(next() % (uint64_t)devices);
    uint64_t what = next() % 100;
    if (what < 55) do_malloc(device);
    else if (what < 85) do_free();
    else if (what < 92) do_bogus(device);
    else if (what < 95) cachalot_reset();
    else if (what < 98) do_fraction(device);
    else if (n_live > 0) cachalot_record_stream((void *)live[next() % (uint64_t)n_live].ptr,
                                                stream_of(next()));
  }
  while (n_live > 0) do_free();
  cachalot_reset();
  for (int d = 0; d < devices; d++) {
    char *end = stats(d);
    /* Byte counts are torch's int64 ones; past 2^63 bytes (devices of 2^63 bytes and more)
     * they saturate and no longer come back to 0. The block counts always do. */
    if (stat(end, "allocated_bytes.all.peak") == INT64_MAX) saturated++;
    else
      CHECK(stat(end, "allocated_bytes.all.current") == 0, "device %d: bytes still allocated", d);
    CHECK(stat(end, "allocation.all.current") == 0, "device %d: allocations still live", d);
    if (strcmp(backend, "native") == 0)
      CHECK(stat(end, "segment.all.current") == 0,
            "device %d: segments still reserved after emptying the cache", d);
    free(end);
  }
  printf("SUMMARY backend=%s devices=%d allocated=%" PRIu64 " out_of_memory=%" PRIu64
         " other_errors=%" PRIu64 " zero=%" PRIu64 " near_top=%" PRIu64 " refused=%" PRIu64
         " bad_fractions=%" PRIu64 " saturated=%" PRIu64 "\n",
         backend, devices, ok, ooms, other_errors, zero, near_top, bogus, fractions, saturated);
  return 0;
}
