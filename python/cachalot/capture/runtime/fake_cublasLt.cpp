// fake_cublasLt.cpp -- CPU-only stand-in for libcublasLt.so.13.
//
// Written from the public header cublasLt.h (nvidia/cu13/include). No NVIDIA
// code is included or copied. Semantics:
//   * handles: any non-null pointer is accepted (PyTorch passes its cuBLAS
//     handle cast to cublasLtHandle_t); cublasLtCreate hands out a small
//     host object;
//   * matmul / layout / preference / transform / emulation descriptors are
//     host objects; Set/GetAttribute store and return the caller's bytes
//     (GetAttribute of an attribute never set returns zeros of the requested
//     size);
//   * cublasLtMatmulAlgoGetHeuristic returns min(requestedAlgoCount,
//     FAKE_CUBLASLT_ALGOS (default 1)) results, each with state SUCCESS,
//     workspaceSize = min(FAKE_CUBLASLT_WORKSPACE (default 0),
//     CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES), wavesCount 1.0. At least one
//     result is needed: PyTorch treats 0 results as CUBLAS_STATUS_NOT_SUPPORTED.
//     PyTorch hands cuBLASLt its own pre-sized workspace, so this value does
//     not change what PyTorch allocates;
//   * cublasLtMatmulAlgoCheck reports the same workspace size;
//   * cublasLtMatmul / cublasLtMatrixTransform do nothing and return SUCCESS.
//
// Provenance: copied from the cachalot team's shared/fakegpu for `cachalot
// capture`, which compiles it at first use (capture/build.py). Changed here:
// status names shared with cuBLAS (cublas_status.h).
#define FK_LIB "cublasLt"
#include "fk_common.h"
#include "cublas_status.h"

#include <cublasLt.h>

#include <map>
#include <unordered_map>

namespace {

struct Attrs {
  std::map<int, std::vector<uint8_t>> kv;
};

std::mutex g_mu;
std::unordered_map<const void*, Attrs>& table() {
  static auto* t = new std::unordered_map<const void*, Attrs>();
  return *t;
}

void set_attr(const void* obj, int attr, const void* buf, size_t n) {
  std::lock_guard<std::mutex> g(g_mu);
  auto& v = table()[obj].kv[attr];
  v.assign(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + n);
}

// Returns false when the attribute was never set.
bool get_attr(const void* obj, int attr, std::vector<uint8_t>* out) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = table().find(obj);
  if (it == table().end()) return false;
  auto a = it->second.kv.find(attr);
  if (a == it->second.kv.end()) return false;
  *out = a->second;
  return true;
}

void forget(const void* obj) {
  std::lock_guard<std::mutex> g(g_mu);
  table().erase(obj);
}

cublasStatus_t generic_get(const void* obj, int attr, void* buf, size_t size, size_t* written) {
  if (!obj) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::vector<uint8_t> v;
  bool have = get_attr(obj, attr, &v);
  if (size == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = have ? v.size() : 8;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
  memset(buf, 0, size);
  size_t n = have ? std::min(size, v.size()) : size;
  if (have) memcpy(buf, v.data(), n);
  if (written) *written = n;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t generic_set(void* obj, int attr, const void* buf, size_t size) {
  if (!obj) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!buf && size) return CUBLAS_STATUS_INVALID_VALUE;
  set_attr(obj, attr, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* e = getenv(name);
  if (!e || !*e) return dflt;
  return strtoull(e, nullptr, 0);
}

size_t heuristic_workspace(cublasLtMatmulPreference_t pref) {
  static uint64_t want = env_u64("FAKE_CUBLASLT_WORKSPACE", 0);
  uint64_t maxws = UINT64_MAX;
  std::vector<uint8_t> v;
  if (pref && get_attr(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &v) && v.size() >= 8)
    memcpy(&maxws, v.data(), 8);
  return static_cast<size_t>(std::min(want, maxws));
}

struct LtHandle {
  uint64_t magic = 0x1A7;
};

constexpr uint64_t kAlgoMagic = 0xFA4EA160ull;  // algo->data[7]

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = reinterpret_cast<cublasLtHandle_t>(new LtHandle());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  FK_TRACE();
  // Only destroy what cublasLtCreate made; PyTorch may pass a cuBLAS handle.
  (void)h;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t s) {
  FK_TRACE();
  return cublas_status_name(s);
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
  FK_TRACE();
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "error (fake cublasLt)";
}
size_t cublasLtGetVersion(void) {
  FK_TRACE();
  return CUBLAS_VERSION;
}
size_t cublasLtGetCudartVersion(void) {
  FK_TRACE();
  return CUDART_VERSION;
}
cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  FK_TRACE();
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; break;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; break;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}
static size_t g_heur_cache_capacity = 8192;
cublasStatus_t cublasLtHeuristicsCacheGetCapacity(size_t* c) {
  FK_TRACE();
  if (!c) return CUBLAS_STATUS_INVALID_VALUE;
  *c = g_heur_cache_capacity;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtHeuristicsCacheSetCapacity(size_t c) {
  FK_TRACE();
  g_heur_cache_capacity = c;
  return CUBLAS_STATUS_SUCCESS;
}
unsigned cublasLtDisableCpuInstructionsSetMask(unsigned mask) {
  FK_TRACE();
  static unsigned m = 0;
  unsigned old = m;
  m = mask;
  return old;
}

// ---- compute: no-ops -----------------------------------------------------------
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void*, const void*,
                              cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t,
                              const void*, const void*, cublasLtMatrixLayout_t, void*,
                              cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t,
                              cudaStream_t) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixTransform(cublasLtHandle_t h, cublasLtMatrixTransformDesc_t,
                                       const void*, const void*, cublasLtMatrixLayout_t,
                                       const void*, const void*, cublasLtMatrixLayout_t, void*,
                                       cublasLtMatrixLayout_t, cudaStream_t) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- descriptors ------------------------------------------------------------------
#define FK_DESC_FUNCS(PFX, OPAQUE, HANDLE_T, ATTR_T)                                          \
  cublasStatus_t PFX##Destroy(HANDLE_T d) {                                                  \
    FK_CALL(#PFX "Destroy");                                                                 \
    if (!d) return CUBLAS_STATUS_SUCCESS;                                                    \
    forget(d);                                                                               \
    delete reinterpret_cast<OPAQUE*>(d);                                                     \
    return CUBLAS_STATUS_SUCCESS;                                                            \
  }                                                                                          \
  cublasStatus_t PFX##SetAttribute(HANDLE_T d, ATTR_T attr, const void* buf, size_t size) {  \
    FK_CALL(#PFX "SetAttribute");                                                            \
    return generic_set(d, static_cast<int>(attr), buf, size);                                \
  }                                                                                          \
  cublasStatus_t PFX##GetAttribute(HANDLE_T d, ATTR_T attr, void* buf, size_t size,          \
                                   size_t* written) {                                        \
    FK_CALL(#PFX "GetAttribute");                                                            \
    return generic_get(d, static_cast<int>(attr), buf, size, written);                       \
  }

FK_DESC_FUNCS(cublasLtMatmulDesc, cublasLtMatmulDescOpaque_t, cublasLtMatmulDesc_t,
              cublasLtMatmulDescAttributes_t)
FK_DESC_FUNCS(cublasLtMatrixLayout, cublasLtMatrixLayoutOpaque_t, cublasLtMatrixLayout_t,
              cublasLtMatrixLayoutAttribute_t)
FK_DESC_FUNCS(cublasLtMatmulPreference, cublasLtMatmulPreferenceOpaque_t,
              cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t)
FK_DESC_FUNCS(cublasLtMatrixTransformDesc, cublasLtMatrixTransformDescOpaque_t,
              cublasLtMatrixTransformDesc_t, cublasLtMatrixTransformDescAttributes_t)
#if FK_CUBLAS_EMULATION
FK_DESC_FUNCS(cublasLtEmulationDesc, cublasLtEmulationDescOpaque_t, cublasLtEmulationDesc_t,
              cublasLtEmulationDescAttributes_t)
#endif
#undef FK_DESC_FUNCS

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  FK_TRACE();
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtMatmulDescOpaque_t();
  int32_t ct = computeType, st = scaleType;
  set_attr(*d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct);
  set_attr(*d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &st, sizeof st);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t d, size_t size,
                                               cublasComputeType_t computeType,
                                               cudaDataType_t scaleType) {
  FK_TRACE();
  if (!d || size < sizeof(*d)) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(d, 0, sizeof(*d));
  forget(d);
  int32_t ct = computeType, st = scaleType;
  set_attr(d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct);
  set_attr(d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &st, sizeof st);
  return CUBLAS_STATUS_SUCCESS;
}
static void layout_init(cublasLtMatrixLayout_t l, cudaDataType type, uint64_t rows, uint64_t cols,
                        int64_t ld) {
  uint32_t t = type;
  set_attr(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof t);
  set_attr(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows);
  set_attr(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols);
  set_attr(l, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  FK_TRACE();
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t();
  layout_init(*l, type, rows, cols, ld);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size,
                                                 cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
  FK_TRACE();
  if (!l || size < sizeof(*l)) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(l, 0, sizeof(*l));
  forget(l);
  layout_init(l, type, rows, cols, ld);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtGroupedMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                                 int, const void*, const void*, const void*) {
  FK_TRACE();
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t();
  uint32_t t = type;
  set_attr(*l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof t);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtGroupedMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size,
                                                        cudaDataType type, int, const void*,
                                                        const void*, const void*) {
  FK_TRACE();
  if (!l || size < sizeof(*l)) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(l, 0, sizeof(*l));
  forget(l);
  uint32_t t = type;
  set_attr(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof t);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  FK_TRACE();
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t p, size_t size) {
  FK_TRACE();
  if (!p || size < sizeof(*p)) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(p, 0, sizeof(*p));
  forget(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixTransformDescCreate(cublasLtMatrixTransformDesc_t* d,
                                                 cudaDataType scaleType) {
  FK_TRACE();
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtMatrixTransformDescOpaque_t();
  uint32_t st = scaleType;
  set_attr(*d, CUBLASLT_MATRIX_TRANSFORM_DESC_SCALE_TYPE, &st, sizeof st);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixTransformDescInit_internal(cublasLtMatrixTransformDesc_t d,
                                                        size_t size, cudaDataType scaleType) {
  FK_TRACE();
  if (!d || size < sizeof(*d)) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(d, 0, sizeof(*d));
  forget(d);
  uint32_t st = scaleType;
  set_attr(d, CUBLASLT_MATRIX_TRANSFORM_DESC_SCALE_TYPE, &st, sizeof st);
  return CUBLAS_STATUS_SUCCESS;
}
#if FK_CUBLAS_EMULATION
cublasStatus_t cublasLtEmulationDescCreate(cublasLtEmulationDesc_t* d) {
  FK_TRACE();
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtEmulationDescOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtEmulationDescInit_internal(cublasLtEmulationDesc_t d, size_t size) {
  FK_TRACE();
  if (!d || size < sizeof(*d)) return CUBLAS_STATUS_ALLOC_FAILED;
  memset(d, 0, sizeof(*d));
  forget(d);
  return CUBLAS_STATUS_SUCCESS;
}
#endif

// ---- algorithm selection --------------------------------------------------------------
static void fill_algo(cublasLtMatmulAlgo_t* algo, int id) {
  memset(algo, 0, sizeof(*algo));
  algo->data[0] = static_cast<uint64_t>(id);
  algo->data[7] = kAlgoMagic;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!op || !results || !returned || requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  static int n_algos = static_cast<int>(env_u64("FAKE_CUBLASLT_ALGOS", 1));
  int n = std::min(requested, std::max(n_algos, 1));
  size_t ws = heuristic_workspace(pref);
  for (int i = 0; i < n; ++i) {
    memset(&results[i], 0, sizeof(results[i]));
    fill_algo(&results[i].algo, i);
    results[i].workspaceSize = ws;
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  *returned = n;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetIds(cublasLtHandle_t h, cublasComputeType_t, cudaDataType_t,
                                        cudaDataType_t, cudaDataType_t, cudaDataType_t,
                                        cudaDataType_t, int requested, int ids[], int* returned) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || !ids || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  static int n_algos = static_cast<int>(env_u64("FAKE_CUBLASLT_ALGOS", 1));
  int n = std::min(requested, std::max(n_algos, 1));
  for (int i = 0; i < n; ++i) ids[i] = i;
  *returned = n;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoInit(cublasLtHandle_t h, cublasComputeType_t, cudaDataType_t,
                                      cudaDataType_t, cudaDataType_t, cudaDataType_t,
                                      cudaDataType_t, int algoId, cublasLtMatmulAlgo_t* algo) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!algo || algoId < 0) return CUBLAS_STATUS_INVALID_VALUE;
  fill_algo(algo, algoId);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                       cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                       cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result) {
  FK_TRACE();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!op || !algo || !result) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulAlgo_t keep = *algo;  // algo may point to result->algo
  memset(result, 0, sizeof(*result));
  result->algo = keep;
  result->workspaceSize = heuristic_workspace(nullptr);
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoCapGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                 cublasLtMatmulAlgoCapAttributes_t, void* buf,
                                                 size_t size, size_t* written) {
  FK_TRACE();
  if (!algo) return CUBLAS_STATUS_INVALID_VALUE;
  if (size == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = 4;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
  memset(buf, 0, size);  // "no split-K, no tiles listed, ...": all capabilities 0
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}
// Config attributes 0..8 are kept in the algo struct itself (it is caller
// memory): attribute a is stored as 32 bits in data[1 + a/2], half a%2.
// CUBLASLT_ALGO_CONFIG_ID (0) lives in data[0].
cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    const void* buf, size_t size) {
  FK_TRACE();
  if (!algo || !buf || size == 0 || size > 8) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t v = 0;
  memcpy(&v, buf, size);
  int a = static_cast<int>(attr);
  if (a == CUBLASLT_ALGO_CONFIG_ID) {
    algo->data[0] = v;
  } else if (a > 0 && a < 12) {
    uint64_t& slot = algo->data[1 + a / 2];
    int shift = (a % 2) * 32;
    slot = (slot & ~(0xFFFFFFFFull << shift)) | ((v & 0xFFFFFFFFull) << shift);
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, size_t size, size_t* written) {
  FK_TRACE();
  if (!algo) return CUBLAS_STATUS_INVALID_VALUE;
  if (size == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = 4;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t v = 0;
  int a = static_cast<int>(attr);
  if (a == CUBLASLT_ALGO_CONFIG_ID) {
    v = algo->data[0];
  } else if (a > 0 && a < 12) {
    v = (algo->data[1 + a / 2] >> ((a % 2) * 32)) & 0xFFFFFFFFull;
    if (a == CUBLASLT_ALGO_CONFIG_SPLITK_NUM && v == 0) v = 1;
  }
  memset(buf, 0, size);
  memcpy(buf, &v, std::min<size_t>(size, 8));
  if (written) *written = std::min<size_t>(size, 8);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- logging ---------------------------------------------------------------------------
cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t) {
  FK_TRACE();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtLoggerSetFile(FILE*) {
  FK_TRACE();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtLoggerOpenFile(const char*) {
  FK_TRACE();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtLoggerSetLevel(int level) {
  FK_TRACE();
  return (level < 0 || level > 5) ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtLoggerSetMask(int) {
  FK_TRACE();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtLoggerForceDisable() {
  FK_TRACE();
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
