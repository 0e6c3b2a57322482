/* Replays a trace through cachalot_malloc / cachalot_free from C, as a host such as torch
 * calls them, and prints the thread CPU time of the loop per operation.
 *
 * usage: replay_loop OPS_FILE SLOTS
 * OPS_FILE holds 16-byte records, written by benches/c_overhead.rs:
 *   uint64_t size;    bytes to allocate (unused for a free)
 *   uint32_t slot;    which allocation (index into a table of SLOTS pointers)
 *   uint32_t stream;  the stream number for an allocation; 0xFFFFFFFF marks a free
 * A failed allocation leaves its slot NULL, and its free is then a no-op (cachalot_free(NULL)),
 * as in cachalot's own replay.
 * Prints "OPS n CPU_NS t" and exits 0; exits 1 with a message on bad input. */
#include "cachalot.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct op {
  uint64_t size;
  uint32_t slot;
  uint32_t stream;
};

#define FREE_MARK 0xFFFFFFFFu

static uint64_t thread_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s OPS_FILE SLOTS\n", argv[0]);
    return 1;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  size_t n = (size_t)bytes / sizeof(struct op);
  struct op *ops = malloc(n * sizeof *ops + 1);
  size_t slots = strtoull(argv[2], NULL, 10);
  void **ptrs = calloc(slots + 1, sizeof *ptrs);
  if (!ops || !ptrs || fread(ops, sizeof *ops, n, f) != n) {
    fprintf(stderr, "%s: cannot read %zu operations\n", argv[1], n);
    return 1;
  }
  fclose(f);
  for (size_t i = 0; i < n; i++) {
    if (ops[i].slot >= slots) {
      fprintf(stderr, "operation %zu: slot %" PRIu32 " outside 0..%zu\n", i, ops[i].slot, slots);
      return 1;
    }
  }

  uint64_t start = thread_ns();
  for (size_t i = 0; i < n; i++) {
    const struct op *o = &ops[i];
    if (o->stream == FREE_MARK) {
      cachalot_free(ptrs[o->slot], 0, 0, NULL);
      ptrs[o->slot] = NULL;
    } else {
      ptrs[o->slot] = cachalot_malloc(o->size, 0, (void *)(uintptr_t)o->stream);
    }
  }
  uint64_t cpu = thread_ns() - start;

  printf("OPS %zu CPU_NS %" PRIu64 "\n", n, cpu);
  free(ptrs);
  free(ops);
  return 0;
}
