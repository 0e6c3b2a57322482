/* The exported functions where stderr cannot be written and on a thread that is exiting:
 * every call must return its normal result, nothing may abort. Run as
 *   hostile closed|pipe|full|tls
 * with CACHALOT_DEVICE=sim CACHALOT_SIM_CAPACITY=1G; `full` expects stderr on /dev/full.
 * Prints "OK <mode> <checks>" and exits 0 when every check held. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cachalot.h"

static int checks, failures;
#define CHECK(c)                                                       \
  do {                                                                 \
    checks++;                                                          \
    if (!(c)) {                                                        \
      failures++;                                                      \
      fprintf(stdout, "FAILED line %d: %s\n", __LINE__, #c);           \
    }                                                                  \
  } while (0)

/* Error paths, each of which reports on stderr, then normal work. */
static void exercise(void) {
  void *big = cachalot_malloc((size_t)2 << 30, 0, NULL); /* out of memory on 1 GiB */
  CHECK(big == NULL);
  CHECK(strstr(cachalot_last_error(), "out of memory") != NULL);
  uint64_t unknown = cachalot_unknown_frees();
  cachalot_free((void *)0x1234, 64, 0, NULL); /* not ours: reported, counted */
  CHECK(cachalot_unknown_frees() == unknown + 1);
  cachalot_set_memory_fraction(2.0, 0); /* out of range: reported */
  CHECK(strlen(cachalot_last_error()) > 0);
  CHECK(cachalot_dump_snapshot("/nonexistent-dir/x.pickle") == -1);
  CHECK(cachalot_malloc(1024, 99, NULL) == NULL); /* bad device index */
  void *p = cachalot_malloc(1 << 20, 0, NULL);
  CHECK(p != NULL);
  const char *stats = cachalot_memory_stats_json(0);
  CHECK(stats != NULL && strstr(stats, "\"allocated_bytes.all.current\"") != NULL);
  cachalot_free(p, 1 << 20, 0, NULL);
  CHECK(cachalot_memory_summary(0) != NULL);
}

static pthread_key_t key;

static void at_thread_exit(void *arg) {
  (void)arg;
  exercise(); /* runs after the thread's Rust thread-locals are destroyed */
}

static void *thread_body(void *arg) {
  (void)arg;
  pthread_setspecific(key, (void *)1);
  /* Touch the library's thread-locals so that they exist and are destroyed first. */
  CHECK(cachalot_malloc((size_t)4 << 30, 0, NULL) == NULL);
  CHECK(cachalot_memory_stats_json(0) != NULL);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "closed") == 0) {
    close(2);
  } else if (strcmp(mode, "pipe") == 0) {
    int fds[2];
    if (pipe(fds) != 0) return 3;
    signal(SIGPIPE, SIG_IGN); /* as Python does: writes fail with EPIPE */
    close(fds[0]);
    dup2(fds[1], 2);
  } else if (strcmp(mode, "tls") == 0) {
    pthread_key_create(&key, at_thread_exit);
    pthread_t t;
    if (pthread_create(&t, NULL, thread_body, NULL) != 0) return 3;
    pthread_join(t, NULL);
  } else if (strcmp(mode, "full") != 0) {
    return 3;
  }
  if (strcmp(mode, "tls") != 0) exercise();
  printf("%s %s %d\n", failures ? "FAILED" : "OK", mode, checks);
  return failures ? 1 : 0;
}
