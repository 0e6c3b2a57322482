// cudart_graphs.cpp -- CUDA graph capture on the capture runtime, for torch.cuda.graphs and
// torch.compile(mode="reduce-overhead"): a stream begins and ends capture, the graph is
// instantiated, launched and destroyed. While a stream captures, cudaStreamIsCapturing and
// cudaStreamGetCaptureInfo (fake_cudart.cpp, through capture_status) report it active with
// its capture id, which is how torch's caching allocator routes the allocations made during
// capture to the graph's private pool, as on a GPU. A graph records nothing (kernels compute
// nothing here), and launching one does nothing but count; the memory a real driver takes
// for an instantiated graph lies outside torch's allocator and is not modelled.
//
// Misuse gets the real runtime's codes: beginning a capture on a stream already capturing,
// or ending one never begun, is cudaErrorIllegalState; a foreign or destroyed graph or
// executable graph is cudaErrorInvalidValue / cudaErrorInvalidResourceHandle.
#include "cudart_internal.h"

namespace fkrt {
namespace {

struct FakeGraph {
  uint64_t capture_id;
  uint64_t nodes = 0;  // kernels launched into it while it was captured
};
struct FakeGraphExec {
  uint64_t capture_id;
};

struct Capture {
  uint64_t id;
  FakeGraph* graph;
};

std::mutex g_mu;
std::unordered_map<const void*, Capture> g_capturing;  // stream -> its capture in progress
std::unordered_set<const void*> g_graphs, g_execs;     // live handles
uint64_t g_next_capture = 1;
std::atomic<uint64_t> g_graph_launches{0};

}  // namespace

cudaStreamCaptureStatus capture_status(const void* stream, unsigned long long* id,
                                       cudaGraph_t* graph) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_capturing.find(stream);
  if (it == g_capturing.end()) {
    if (id) *id = 0;
    if (graph) *graph = nullptr;
    return cudaStreamCaptureStatusNone;
  }
  if (id) *id = it->second.id;
  if (graph) *graph = reinterpret_cast<cudaGraph_t>(it->second.graph);
  return cudaStreamCaptureStatusActive;
}

void capture_kernel(const void* stream) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_capturing.find(stream);
  if (it != g_capturing.end()) it->second.graph->nodes++;
}

}  // namespace fkrt

using namespace fkrt;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return set_err(cudaErrorInvalidValue);
  if (!stream) return set_err(cudaErrorStreamCaptureUnsupported);  // the legacy stream
  std::lock_guard<std::mutex> g(g_mu);
  if (g_capturing.count(stream)) return set_err(cudaErrorIllegalState);
  uint64_t id = g_next_capture++;
  auto* graph = new FakeGraph{id};
  g_graphs.insert(graph);
  g_capturing[stream] = Capture{id, graph};
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!pGraph) return set_err(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_capturing.find(stream);
  if (it == g_capturing.end()) return set_err(cudaErrorIllegalState);
  *pGraph = reinterpret_cast<cudaGraph_t>(it->second.graph);
  g_capturing.erase(it);
  return cudaSuccess;
}

#if CUDART_VERSION >= 13000
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t*,
                                                const cudaGraphEdgeData*, size_t, unsigned int) {
#else  // CUDA 12: no edge data (that is cudaStreamUpdateCaptureDependencies_v2)
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t*, size_t,
                                                unsigned int) {
#endif
  std::lock_guard<std::mutex> g(g_mu);
  return g_capturing.count(stream) ? cudaSuccess : set_err(cudaErrorIllegalState);
}

// The kernels captured; node handles, if asked for, are null (nothing can be done with one).
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (!numNodes) return set_err(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_graphs.count(graph)) return set_err(cudaErrorInvalidValue);
  uint64_t n = reinterpret_cast<FakeGraph*>(graph)->nodes;
  if (nodes) {
    if (*numNodes > n) *numNodes = n;
    for (size_t i = 0; i < *numNodes; i++) nodes[i] = nullptr;
  } else {
    *numNodes = n;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                          unsigned long long) {
  if (!pGraphExec) return set_err(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_graphs.count(graph)) return set_err(cudaErrorInvalidValue);
  auto* exec = new FakeGraphExec{reinterpret_cast<FakeGraph*>(graph)->capture_id};
  g_execs.insert(exec);
  *pGraphExec = reinterpret_cast<cudaGraphExec_t>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  return cudaGraphInstantiateWithFlags(pGraphExec, graph, flags);
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t) {
  std::lock_guard<std::mutex> g(g_mu);
  return g_execs.count(exec) ? cudaSuccess : set_err(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_execs.count(exec)) return set_err(cudaErrorInvalidResourceHandle);
  g_graph_launches.fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_execs.erase(exec)) return set_err(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<FakeGraphExec*>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_graphs.count(graph)) return set_err(cudaErrorInvalidValue);
  for (auto& kv : g_capturing)
    if (kv.second.graph == reinterpret_cast<FakeGraph*>(graph))
      return set_err(cudaErrorIllegalState);  // still being captured
  g_graphs.erase(graph);
  delete reinterpret_cast<FakeGraph*>(graph);
  return cudaSuccess;
}

// Graphs launched so far (cudaGraphLaunch).
uint64_t fakecuda_graph_launches(void) { return g_graph_launches.load(); }

}  // extern "C"
