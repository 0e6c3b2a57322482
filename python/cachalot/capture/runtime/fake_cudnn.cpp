// fake_cudnn.cpp -- CPU-only stand-in for libcudnn.so.9 (cuDNN 9.26).
//
// Written from the public headers in nvidia/cudnn/include (cudnn_graph_v9.h,
// cudnn_ops_v9.h, cudnn_cnn_v9.h, cudnn_adv_v9.h). No NVIDIA code is included
// or copied. Nothing here touches device memory or allocates any.
//
// Legacy API: handles and descriptors are host structs that remember what was
// set; compute calls (convolution, batch norm, pooling, CTC, spatial
// transformer, RNN) return CUDNN_STATUS_SUCCESS and do nothing.
//
// Backend (graph) API, as used by cudnn_frontend inside libtorch_cuda.so:
// every descriptor is a host object holding the attributes set on it.
// cudnnBackendGetAttribute returns what was set; a BACKEND_DESCRIPTOR-typed
// query copies the referenced descriptor's state into the caller-created
// descriptor(s), which is how the real library hands back engines, engine
// configs, tensors, ... A few attributes are synthesized:
//   OPERATIONGRAPH_ENGINE_GLOBAL_COUNT  FAKE_CUDNN_ENGINES (default 1)
//   ENGINEHEUR_RESULTS                  FAKE_CUDNN_ENGINES engine configs,
//                                       engine global index 0..N-1
//   ENGINECFG_ENGINE                    that engine
//   ENGINECFG_KNOB_CHOICES / INTERMEDIATE_INFO, ENGINE_KNOB_INFO /
//   NUMERICAL_NOTE / BEHAVIOR_NOTE / LAYOUT_INFO      empty lists: no knobs and
//                                       no notes, so no PyTorch filter (TF32,
//                                       determinism, down-conversion) drops it
//   ENGINECFG_WORKSPACE_SIZE, EXECUTION_PLAN_WORKSPACE_SIZE
//                                       FAKE_CUDNN_WORKSPACE bytes (default 0)
//   EXECUTION_PLAN_JSON_REPRESENTATION  a small JSON naming the fake engine
// Workspace-size policy (a known deviation from a real GPU, where cuDNN picks
// an engine and its workspace from the problem):
//   FAKE_CUDNN_WORKSPACE     conv / graph plans, legacy conv *WorkspaceSize and
//                            the memory field of *AlgoPerf results (default 0)
//   FAKE_CUDNN_BN_WORKSPACE  batch-norm Ex workspace queries (default 0)
//   FAKE_CUDNN_BN_RESERVE    batch-norm training reserve space (default 0)
//
// Provenance: copied from the cachalot team's shared/fakegpu for `cachalot
// capture`, which compiles it at first use (capture/build.py). Changed here:
// split into the legacy and the backend API (see below).
//
// The library is two files: this one (the legacy API) and cudnn_backend.cpp
// (the backend graph API), sharing cudnn_internal.h.
#include "cudnn_internal.h"

namespace fkdnn {

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* e = getenv(name);
  if (!e || !*e) return dflt;
  char* end = nullptr;
  double v = strtod(e, &end);
  uint64_t mult = 1;
  if (end) switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: break;
    }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}
uint64_t ws_conv() { static uint64_t v = env_u64("FAKE_CUDNN_WORKSPACE", 0); return v; }
uint64_t ws_bn() { static uint64_t v = env_u64("FAKE_CUDNN_BN_WORKSPACE", 0); return v; }
uint64_t rs_bn() { static uint64_t v = env_u64("FAKE_CUDNN_BN_RESERVE", 0); return v; }
int64_t n_engines() {
  static int64_t v = std::max<int64_t>(1, static_cast<int64_t>(env_u64("FAKE_CUDNN_ENGINES", 1)));
  return v;
}

thread_local std::string t_last_error;

}  // namespace fkdnn

using namespace fkdnn;

namespace {

// ---------------------------------------------------------------------------
// legacy handles and descriptors
// ---------------------------------------------------------------------------
struct TensorDesc {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::vector<int> dims, strides;
};
struct FilterDesc {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  std::vector<int> dims;
};
struct ConvDesc {
  std::vector<int> pad, stride, dilation;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct GenericDesc {
  int kind;
};

template <typename T, typename H>
cudnnStatus_t create(H* out) {
  if (!out) return CUDNN_STATUS_BAD_PARAM;
  *out = reinterpret_cast<H>(new T());
  return CUDNN_STATUS_SUCCESS;
}
template <typename T, typename H>
cudnnStatus_t destroy(H d) {
  delete reinterpret_cast<T*>(d);
  return CUDNN_STATUS_SUCCESS;
}

template <typename Perf, typename Algo>
static void fill_perf(Perf* p, int requested, int* returned, cudnnConvolutionDescriptor_t conv) {
  int n = requested > 0 ? 1 : 0;
  if (returned) *returned = n;
  if (!p) return;
  for (int i = 0; i < n; ++i) {
    memset(&p[i], 0, sizeof(p[i]));
    p[i].algo = static_cast<Algo>(1);  // *_ALGO_1 / IMPLICIT_PRECOMP_GEMM: exists for fwd, bwd data and bwd filter
    p[i].status = CUDNN_STATUS_SUCCESS;
    p[i].time = 1.0f;
    p[i].memory = ws_conv();
    p[i].determinism = CUDNN_DETERMINISTIC;
    auto* c = reinterpret_cast<ConvDesc*>(conv);
    p[i].mathType = c ? c->math : CUDNN_DEFAULT_MATH;
  }
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------
// version / errors / handle
// ---------------------------------------------------------------------------
size_t cudnnGetVersion(void) {
  FK_TRACE();
  return CUDNN_VERSION;
}
size_t cudnnGetMaxDeviceVersion(void) {
  FK_TRACE();
  return 1200;  // newest compute capability the fake claims to support (x100)
}
size_t cudnnGetCudartVersion(void) {
  FK_TRACE();
  return CUDART_VERSION;
}
cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  FK_TRACE();
  if (!value) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; break;
    case MINOR_VERSION: *value = CUDNN_MINOR; break;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; break;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}
const char* cudnnGetErrorString(cudnnStatus_t s) {
  FK_TRACE();
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN (fake cudnn)";
  }
}
void cudnnGetLastErrorString(char* message, size_t max_size) {
  FK_TRACE();
  if (!message || !max_size) return;
  snprintf(message, max_size, "%s", t_last_error.c_str());
  t_last_error.clear();
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  FK_TRACE();
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = reinterpret_cast<cudnnHandle_t>(new Handle());
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  FK_TRACE();
  Handle* h = H(handle);
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  h->magic = 0;
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t s) {
  FK_TRACE();
  Handle* h = H(handle);
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* s) {
  FK_TRACE();
  Handle* h = H(handle);
  if (!h || !s) return CUDNN_STATUS_BAD_PARAM;
  *s = h->stream;
  return CUDNN_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------
// legacy descriptors
// ---------------------------------------------------------------------------
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { FK_TRACE(); return create<TensorDesc>(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { FK_TRACE(); return destroy<TensorDesc>(d); }
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t dt, int nb,
                                         const int dimA[], const int strideA[]) {
  FK_TRACE();
  auto* t = reinterpret_cast<TensorDesc*>(d);
  if (!t || nb <= 0 || !dimA || !strideA) return CUDNN_STATUS_BAD_PARAM;
  t->dtype = dt;
  t->dims.assign(dimA, dimA + nb);
  t->strides.assign(strideA, strideA + nb);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t fmt,
                                         cudnnDataType_t dt, int n, int c, int h, int w) {
  FK_TRACE();
  auto* t = reinterpret_cast<TensorDesc*>(d);
  if (!t) return CUDNN_STATUS_BAD_PARAM;
  t->dtype = dt;
  t->dims = {n, c, h, w};
  if (fmt == CUDNN_TENSOR_NHWC) t->strides = {h * w * c, 1, w * c, c};
  else t->strides = {c * h * w, h * w, w, 1};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t d, int nbReq,
                                         cudnnDataType_t* dt, int* nb, int dimA[], int strideA[]) {
  FK_TRACE();
  auto* t = reinterpret_cast<const TensorDesc*>(d);
  if (!t) return CUDNN_STATUS_BAD_PARAM;
  if (dt) *dt = t->dtype;
  if (nb) *nb = static_cast<int>(t->dims.size());
  for (int i = 0; i < nbReq && i < static_cast<int>(t->dims.size()); ++i) {
    if (dimA) dimA[i] = t->dims[i];
    if (strideA) strideA[i] = t->strides[i];
  }
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { FK_TRACE(); return create<FilterDesc>(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { FK_TRACE(); return destroy<FilterDesc>(d); }
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dt,
                                         cudnnTensorFormat_t fmt, int nb, const int dimA[]) {
  FK_TRACE();
  auto* f = reinterpret_cast<FilterDesc*>(d);
  if (!f || nb <= 0 || !dimA) return CUDNN_STATUS_BAD_PARAM;
  f->dtype = dt;
  f->format = fmt;
  f->dims.assign(dimA, dimA + nb);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t d, int nbReq,
                                         cudnnDataType_t* dt, cudnnTensorFormat_t* fmt, int* nb,
                                         int dimA[]) {
  FK_TRACE();
  auto* f = reinterpret_cast<const FilterDesc*>(d);
  if (!f) return CUDNN_STATUS_BAD_PARAM;
  if (dt) *dt = f->dtype;
  if (fmt) *fmt = f->format;
  if (nb) *nb = static_cast<int>(f->dims.size());
  for (int i = 0; i < nbReq && i < static_cast<int>(f->dims.size()); ++i)
    if (dimA) dimA[i] = f->dims[i];
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) { FK_TRACE(); return create<ConvDesc>(d); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { FK_TRACE(); return destroy<ConvDesc>(d); }
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n, const int padA[],
                                              const int strideA[], const int dilA[],
                                              cudnnConvolutionMode_t mode, cudnnDataType_t ct) {
  FK_TRACE();
  auto* c = reinterpret_cast<ConvDesc*>(d);
  if (!c || n <= 0) return CUDNN_STATUS_BAD_PARAM;
  c->pad.assign(padA, padA + n);
  c->stride.assign(strideA, strideA + n);
  c->dilation.assign(dilA, dilA + n);
  c->mode = mode;
  c->compute = ct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int g) {
  FK_TRACE();
  auto* c = reinterpret_cast<ConvDesc*>(d);
  if (!c || g <= 0) return CUDNN_STATUS_BAD_PARAM;
  c->groups = g;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  FK_TRACE();
  auto* c = reinterpret_cast<ConvDesc*>(d);
  if (!c) return CUDNN_STATUS_BAD_PARAM;
  c->math = m;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t* m) {
  FK_TRACE();
  auto* c = reinterpret_cast<ConvDesc*>(d);
  if (!c || !m) return CUDNN_STATUS_BAD_PARAM;
  *m = c->math;
  return CUDNN_STATUS_SUCCESS;
}

#define FK_GENERIC_DESC(CREATE, DESTROY, HT)                                       \
  cudnnStatus_t CREATE(HT* d) { FK_CALL(#CREATE); return create<GenericDesc>(d); } \
  cudnnStatus_t DESTROY(HT d) { FK_CALL(#DESTROY); return destroy<GenericDesc>(d); }
FK_GENERIC_DESC(cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor, cudnnActivationDescriptor_t)
FK_GENERIC_DESC(cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor, cudnnPoolingDescriptor_t)
FK_GENERIC_DESC(cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor, cudnnDropoutDescriptor_t)
FK_GENERIC_DESC(cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor, cudnnRNNDescriptor_t)
FK_GENERIC_DESC(cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor, cudnnRNNDataDescriptor_t)
FK_GENERIC_DESC(cudnnCreateCTCLossDescriptor, cudnnDestroyCTCLossDescriptor, cudnnCTCLossDescriptor_t)
FK_GENERIC_DESC(cudnnCreateSpatialTransformerDescriptor, cudnnDestroySpatialTransformerDescriptor,
                cudnnSpatialTransformerDescriptor_t)
#undef FK_GENERIC_DESC

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t, cudnnActivationMode_t,
                                           cudnnNanPropagation_t, double) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t, cudnnPoolingMode_t,
                                          cudnnNanPropagation_t, int, int, int, int, int, int) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
// Dropout RNG state buffer: PyTorch allocates it itself (cuDNN RNN only).
cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t, size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = env_u64("FAKE_CUDNN_DROPOUT_STATES", 0);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t, cudnnHandle_t, float, void*, size_t,
                                        unsigned long long) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t, cudnnHandle_t, float, void*,
                                            size_t, unsigned long long) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t, cudnnDataType_t,
                                          cudnnLossNormalizationMode_t, cudnnNanPropagation_t) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetCTCLossDescriptor_v9(cudnnCTCLossDescriptor_t, cudnnDataType_t,
                                           cudnnLossNormalizationMode_t, cudnnCTCGradMode_t, int) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetSpatialTransformerNdDescriptor(cudnnSpatialTransformerDescriptor_t,
                                                     cudnnSamplerType_t, cudnnDataType_t, const int,
                                                     const int[]) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t, cudnnDataType_t, cudnnRNNDataLayout_t,
                                        int, int, int, const int[], void*) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t, cudnnRNNAlgo_t, cudnnRNNMode_t,
                                       cudnnRNNBiasMode_t, cudnnDirectionMode_t, cudnnRNNInputMode_t,
                                       cudnnDataType_t, cudnnDataType_t, cudnnMathType_t, int32_t,
                                       int32_t, int32_t, int32_t, cudnnDropoutDescriptor_t, uint32_t) {
  FK_TRACE();
  return CUDNN_STATUS_SUCCESS;
}
// cuDNN RNNs are not emulated: the weight-space layout would have to match
// cuDNN's exactly for PyTorch to build its weight views. Report NOT_SUPPORTED
// so PyTorch fails loudly instead of running on a wrong layout.
cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t, cudnnRNNDescriptor_t, size_t*) {
  FK_TRACE();
  t_last_error = "fake cudnn: RNNs are not emulated";
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t, cudnnRNNDescriptor_t, int32_t, size_t,
                                      const void*, int32_t, cudnnTensorDescriptor_t, void**,
                                      cudnnTensorDescriptor_t, void**) {
  FK_TRACE();
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t, cudnnRNNDescriptor_t, cudnnForwardMode_t,
                                        cudnnRNNDataDescriptor_t, size_t*, size_t*) {
  FK_TRACE();
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnRNNForward(cudnnHandle_t, cudnnRNNDescriptor_t, cudnnForwardMode_t, const int32_t[],
                              cudnnRNNDataDescriptor_t, const void*, cudnnRNNDataDescriptor_t, void*,
                              cudnnTensorDescriptor_t, const void*, void*, cudnnTensorDescriptor_t,
                              const void*, void*, size_t, const void*, size_t, void*, size_t, void*) {
  FK_TRACE();
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t, cudnnRNNDescriptor_t, const int32_t[],
                                      cudnnRNNDataDescriptor_t, const void*, const void*,
                                      cudnnRNNDataDescriptor_t, void*, cudnnTensorDescriptor_t,
                                      const void*, const void*, void*, cudnnTensorDescriptor_t,
                                      const void*, const void*, void*, size_t, const void*, size_t,
                                      void*, size_t, void*) {
  FK_TRACE();
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t, cudnnRNNDescriptor_t, cudnnWgradMode_t,
                                         const int32_t[], cudnnRNNDataDescriptor_t, const void*,
                                         cudnnTensorDescriptor_t, const void*,
                                         cudnnRNNDataDescriptor_t, const void*, size_t, void*, size_t,
                                         void*, size_t, void*) {
  FK_TRACE();
  return CUDNN_STATUS_NOT_SUPPORTED;
}

// ---------------------------------------------------------------------------
// legacy convolution: algorithm queries and no-op compute
// ---------------------------------------------------------------------------
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                     const cudnnFilterDescriptor_t,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t, const int req,
                                                     int* ret, cudnnConvolutionFwdAlgoPerf_t* perf) {
  FK_TRACE();
  fill_perf<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(perf, req, ret, conv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                          const cudnnTensorDescriptor_t,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t, const int req,
                                                          int* ret,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  FK_TRACE();
  fill_perf<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(perf, req, ret, conv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t, const int req, int* ret,
    cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  FK_TRACE();
  fill_perf<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(perf, req, ret, conv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const void*, const cudnnFilterDescriptor_t, const void*,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t, void*, const int req, int* ret,
    cudnnConvolutionFwdAlgoPerf_t* perf, void*, size_t) {
  FK_TRACE();
  fill_perf<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(perf, req, ret, conv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t, const cudnnFilterDescriptor_t, const void*, const cudnnTensorDescriptor_t, const void*,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t, void*, const int req, int* ret,
    cudnnConvolutionBwdDataAlgoPerf_t* perf, void*, size_t) {
  FK_TRACE();
  fill_perf<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(perf, req, ret, conv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t, const void*,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t, void*, const int req, int* ret,
    cudnnConvolutionBwdFilterAlgoPerf_t* perf, void*, size_t) {
  FK_TRACE();
  fill_perf<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(perf, req, ret, conv);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                      const cudnnFilterDescriptor_t,
                                                      const cudnnConvolutionDescriptor_t,
                                                      const cudnnTensorDescriptor_t,
                                                      cudnnConvolutionFwdAlgo_t, size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_conv();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                           const cudnnTensorDescriptor_t,
                                                           const cudnnConvolutionDescriptor_t,
                                                           const cudnnTensorDescriptor_t,
                                                           cudnnConvolutionBwdDataAlgo_t, size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_conv();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t,
                                                             const cudnnTensorDescriptor_t,
                                                             const cudnnTensorDescriptor_t,
                                                             const cudnnConvolutionDescriptor_t,
                                                             const cudnnFilterDescriptor_t,
                                                             cudnnConvolutionBwdFilterAlgo_t,
                                                             size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_conv();
  return CUDNN_STATUS_SUCCESS;
}
#define FK_NOOP(NAME, ...)                                         \
  cudnnStatus_t NAME(__VA_ARGS__) {                                \
    FK_CALL(#NAME);                                                \
    return CUDNN_STATUS_SUCCESS;                                   \
  }
FK_NOOP(cudnnConvolutionForward, cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*,
        const cudnnFilterDescriptor_t, const void*, const cudnnConvolutionDescriptor_t,
        cudnnConvolutionFwdAlgo_t, void*, size_t, const void*, const cudnnTensorDescriptor_t, void*)
FK_NOOP(cudnnConvolutionBackwardData, cudnnHandle_t, const void*, const cudnnFilterDescriptor_t,
        const void*, const cudnnTensorDescriptor_t, const void*, const cudnnConvolutionDescriptor_t,
        cudnnConvolutionBwdDataAlgo_t, void*, size_t, const void*, const cudnnTensorDescriptor_t, void*)
FK_NOOP(cudnnConvolutionBackwardFilter, cudnnHandle_t, const void*, const cudnnTensorDescriptor_t,
        const void*, const cudnnTensorDescriptor_t, const void*, const cudnnConvolutionDescriptor_t,
        cudnnConvolutionBwdFilterAlgo_t, void*, size_t, const void*, const cudnnFilterDescriptor_t,
        void*)
FK_NOOP(cudnnConvolutionBiasActivationForward, cudnnHandle_t, const void*, const cudnnTensorDescriptor_t,
        const void*, const cudnnFilterDescriptor_t, const void*, const cudnnConvolutionDescriptor_t,
        cudnnConvolutionFwdAlgo_t, void*, size_t, const void*, const cudnnTensorDescriptor_t,
        const void*, const cudnnTensorDescriptor_t, const void*, const cudnnActivationDescriptor_t,
        const cudnnTensorDescriptor_t, void*)
FK_NOOP(cudnnPoolingForward, cudnnHandle_t, const cudnnPoolingDescriptor_t, const void*,
        const cudnnTensorDescriptor_t, const void*, const void*, const cudnnTensorDescriptor_t, void*)

// ---------------------------------------------------------------------------
// batch norm
// ---------------------------------------------------------------------------
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnActivationDescriptor_t, size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_bn();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnActivationDescriptor_t,
    size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_bn();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t, cudnnBatchNormMode_t,
                                                                   cudnnBatchNormOps_t,
                                                                   const cudnnActivationDescriptor_t,
                                                                   const cudnnTensorDescriptor_t,
                                                                   size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = rs_bn();
  return CUDNN_STATUS_SUCCESS;
}
FK_NOOP(cudnnBatchNormalizationForwardTrainingEx, cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t,
        const void*, const void*, const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t,
        const void*, const cudnnTensorDescriptor_t, void*, const cudnnTensorDescriptor_t, const void*,
        const void*, double, void*, void*, double, void*, void*, cudnnActivationDescriptor_t, void*,
        size_t, void*, size_t)
FK_NOOP(cudnnBatchNormalizationBackwardEx, cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t,
        const void*, const void*, const void*, const void*, const cudnnTensorDescriptor_t, const void*,
        const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t, const void*,
        const cudnnTensorDescriptor_t, void*, const cudnnTensorDescriptor_t, void*,
        const cudnnTensorDescriptor_t, const void*, const void*, void*, void*, double, const void*,
        const void*, cudnnActivationDescriptor_t, void*, size_t, void*, size_t)
FK_NOOP(cudnnBatchNormalizationForwardInference, cudnnHandle_t, cudnnBatchNormMode_t, const void*,
        const void*, const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t, void*,
        const cudnnTensorDescriptor_t, const void*, const void*, const void*, const void*, double)

// ---------------------------------------------------------------------------
// CTC loss, spatial transformer
// ---------------------------------------------------------------------------
cudnnStatus_t cudnnGetCTCLossWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                           const cudnnTensorDescriptor_t, const int*, const int*,
                                           const int*, cudnnCTCLossAlgo_t, cudnnCTCLossDescriptor_t,
                                           size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_conv();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetCTCLossWorkspaceSize_v8(cudnnHandle_t, cudnnCTCLossAlgo_t, cudnnCTCLossDescriptor_t,
                                              const cudnnTensorDescriptor_t,
                                              const cudnnTensorDescriptor_t, size_t* size) {
  FK_TRACE();
  if (!size) return CUDNN_STATUS_BAD_PARAM;
  *size = ws_conv();
  return CUDNN_STATUS_SUCCESS;
}
FK_NOOP(cudnnCTCLoss, cudnnHandle_t, const cudnnTensorDescriptor_t, const void*, const int[], const int[],
        const int[], void*, const cudnnTensorDescriptor_t, void*, cudnnCTCLossAlgo_t,
        cudnnCTCLossDescriptor_t, void*, size_t)
FK_NOOP(cudnnCTCLoss_v8, cudnnHandle_t, cudnnCTCLossAlgo_t, cudnnCTCLossDescriptor_t,
        const cudnnTensorDescriptor_t, const void*, const int[], const int[], const int[], void*,
        const cudnnTensorDescriptor_t, void*, size_t, void*)
FK_NOOP(cudnnSpatialTfGridGeneratorForward, cudnnHandle_t, const cudnnSpatialTransformerDescriptor_t,
        const void*, void*)
FK_NOOP(cudnnSpatialTfGridGeneratorBackward, cudnnHandle_t, const cudnnSpatialTransformerDescriptor_t,
        const void*, void*)
FK_NOOP(cudnnSpatialTfSamplerForward, cudnnHandle_t, cudnnSpatialTransformerDescriptor_t, const void*,
        const cudnnTensorDescriptor_t, const void*, const void*, const void*, cudnnTensorDescriptor_t,
        void*)
FK_NOOP(cudnnSpatialTfSamplerBackward, cudnnHandle_t, cudnnSpatialTransformerDescriptor_t, const void*,
        const cudnnTensorDescriptor_t, const void*, const void*, const cudnnTensorDescriptor_t, void*,
        const void*, const cudnnTensorDescriptor_t, const void*, const void*, const void*, void*)
#undef FK_NOOP


}  // extern "C"
