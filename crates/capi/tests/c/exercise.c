/* Drives libcachalot.so from C the way PyTorch does, on the simulated device
 * (CACHALOT_DEVICE=sim): 8 threads on 4 streams, a second device, record_stream, an unknown
 * free, the hooks, statistics, summary and snapshot. Built and run by tests/c_program.rs.
 *
 * usage: exercise MODE SNAPSHOT_PATH    MODE: native | async | bad-config | cuda-absent
 * Prints "STATS<n> <json>" lines for the Rust test to check; exits 1 on a failed check. */
#include "cachalot.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "exercise.c:%d: check failed: %s (last error: %s)\n",    \
              __LINE__, #c, cachalot_last_error());                            \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define THREADS 8
#define ROUNDS 2000
#define SLOTS 64

static cachalot_stream_t stream_of(uintptr_t id) { return (cachalot_stream_t)id; }

static void *worker(void *arg) {
  uintptr_t t = (uintptr_t)arg;
  cachalot_stream_t s = stream_of(0x1000 + (t % 4) * 0x10);
  void *live[SLOTS] = {0};
  for (size_t i = 0; i < ROUNDS; i++) {
    size_t slot = (i * 7 + t) % SLOTS;
    if (live[slot]) {
      cachalot_free(live[slot], 0, 0, s);
      live[slot] = NULL;
    }
    size_t size = 512 + (i * 7919 + t * 104729) % (3u << 20);
    live[slot] = cachalot_malloc(size, 0, s);
    CHECK(live[slot] != NULL);
    if (i % 50 == 0) cachalot_record_stream(live[slot], stream_of(0x9999));
  }
  for (size_t slot = 0; slot < SLOTS; slot++)
    if (live[slot]) cachalot_free(live[slot], 0, 0, s);
  return NULL;
}

static void print_stats(const char *tag, int device) {
  const char *json = cachalot_memory_stats_json(device);
  CHECK(json != NULL);
  printf("%s %s\n", tag, json);
}

int main(int argc, char **argv) {
  CHECK(argc == 3);
  const char *mode = argv[1];

  if (strcmp(mode, "bad-config") == 0) {
    /* A configuration torch rejects: nothing is allocated, nothing aborts. */
    cachalot_init(1);
    CHECK(cachalot_malloc(1024, 0, NULL) == NULL);
    CHECK(strstr(cachalot_last_error(), "configuration rejected") != NULL);
    CHECK(cachalot_backend() == NULL);
    CHECK(cachalot_memory_stats_json(0) == NULL);
    cachalot_free((void *)0x1000, 1024, 0, NULL);
    printf("BAD-CONFIG-OK %s\n", cachalot_last_error());
    return 0;
  }

  if (strcmp(mode, "cuda-absent") == 0) {
    /* CACHALOT_DEVICE=cuda on a machine without CUDA: NULLs and errors, no abort. */
    cachalot_init(1);
    CHECK(cachalot_malloc(1024, 0, NULL) == NULL);
    CHECK(strstr(cachalot_last_error(), "no CUDA driver found") != NULL);
    CHECK(cachalot_malloc(1024, 0, NULL) == NULL);
    CHECK(cachalot_memory_stats_json(0) == NULL);
    cachalot_free((void *)0x1000, 1024, 0, NULL);
    CHECK(cachalot_unknown_frees() == 1);
    printf("CUDA-ABSENT-OK %s\n", cachalot_last_error());
    return 0;
  }

  cachalot_init(2);
  CHECK(strcmp(cachalot_backend(),
               strcmp(mode, "async") == 0 ? "cudaMallocAsync" : "native") == 0);
  CHECK(cachalot_malloc(0, 0, NULL) == NULL);
  int is_async = strcmp(mode, "async") == 0;
  CHECK(cachalot_record_history(is_async ? 0 : 100000) == 0);
  void *first = cachalot_malloc(1, 0, NULL);
  CHECK(first != NULL);
  printf("FIRST %p\n", first);

  pthread_t threads[THREADS];
  for (uintptr_t t = 0; t < THREADS; t++)
    CHECK(pthread_create(&threads[t], NULL, worker, (void *)t) == 0);
  for (int t = 0; t < THREADS; t++) CHECK(pthread_join(threads[t], NULL) == 0);

  /* A second device keeps one allocation alive. */
  void *other = cachalot_malloc(5u << 20, 1, stream_of(7));
  CHECK(other != NULL && other != first);
  cachalot_record_stream(other, stream_of(8));
  cachalot_free(first, 1, 0, NULL);

  /* Misuse is reported, not fatal. */
  cachalot_free((void *)0x1234, 64, 0, NULL);
  cachalot_free(first, 1, 0, NULL); /* double free */
  cachalot_free((void *)0x1234, 64, 99, NULL); /* bad device index */
  CHECK(cachalot_unknown_frees() == 3);
  cachalot_record_stream((void *)0x1234, stream_of(8));
  CHECK(strstr(cachalot_last_error(), "not an allocation") != NULL);
  /* NULL (an empty tensor's storage) is no allocation and no error, as in torch: the last
   * error is still the one above. */
  cachalot_record_stream(NULL, stream_of(8));
  CHECK(strstr(cachalot_last_error(), "0x1234") != NULL);

  print_stats("STATS0", 0);
  print_stats("STATS1", 1);
  const char *summary = cachalot_memory_summary(0);
  CHECK(summary != NULL);
  printf("SUMMARY-BEGIN\n%s\nSUMMARY-END\n", summary);

  int rc = cachalot_dump_snapshot(argv[2]);
  printf("SNAPSHOT %d\n", rc);
  CHECK(cachalot_dump_snapshot(NULL) == -1);

  cachalot_reset(); /* torch.cuda.empty_cache() */
  print_stats("RESET0", 0);
  print_stats("RESET1", 1);

  /* Half of the 80 GiB device: 60 GiB no longer fits. */
  cachalot_set_memory_fraction(0.5, 0);
  CHECK(cachalot_malloc((size_t)60 << 30, 0, NULL) == NULL);
  CHECK(strstr(cachalot_last_error(), "out of memory") != NULL);
  cachalot_set_memory_fraction(2.0, 0);
  CHECK(strstr(cachalot_last_error(), "fraction") != NULL);
  cachalot_reset_peak_stats(0);
  cachalot_reset_accumulated_stats(0);
  print_stats("FINAL0", 0);
  cachalot_free(other, 5u << 20, 1, stream_of(7));
  printf("DONE\n");
  return 0;
}
