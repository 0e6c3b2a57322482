/* Test support: CUDA stream capture as bookkeeping, preloaded ahead of the fake GPU's
 * libcudart (which refuses cudaStreamBeginCapture). One stream captures at a time; graphs
 * and executable graphs are dummy handles; replays do nothing. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
typedef void *cudaGraphNode_t;
enum { cudaSuccess = 0, cudaErrorIllegalState = 401 };
enum { statusNone = 0, statusActive = 1 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t capturing;
static unsigned long long capture_id, next_id = 1;
static char graph_token, exec_token;

cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode) {
  (void)mode;
  pthread_mutex_lock(&lock);
  cudaError_t rc = cudaSuccess;
  if (capturing) rc = cudaErrorIllegalState;
  else { capturing = s; capture_id = next_id++; }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int status_of(cudaStream_t s, unsigned long long *id) {
  pthread_mutex_lock(&lock);
  int active = capturing != NULL && s == capturing;
  if (id) *id = active ? capture_id : 0;
  pthread_mutex_unlock(&lock);
  return active ? statusActive : statusNone;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status) {
  *status = status_of(s, NULL);
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, int *status, unsigned long long *id,
                                     cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                     const void **edges, size_t *ndeps) {
  unsigned long long got;
  int st = status_of(s, &got);
  if (status) *status = st;
  if (id) *id = got;
  if (graph) *graph = st == statusActive ? (cudaGraph_t)&graph_token : NULL;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (ndeps) *ndeps = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
  pthread_mutex_lock(&lock);
  cudaError_t rc = cudaSuccess;
  if (capturing != s) rc = cudaErrorIllegalState;
  else capturing = NULL;
  pthread_mutex_unlock(&lock);
  *graph = rc == cudaSuccess ? (cudaGraph_t)&graph_token : NULL;
  return rc;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n) {
  (void)g; (void)nodes;
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f) {
  (void)g; (void)f;
  *e = (cudaGraphExec_t)&exec_token;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { (void)g; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { (void)e; return cudaSuccess; }
