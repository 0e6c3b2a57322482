// cudnn_backend.cpp -- the backend (graph) API of the fake libcudnn.so.9, as
// cudnn_frontend inside libtorch_cuda.so uses it: every descriptor is a host
// object holding the attributes set on it; the attributes the real library
// computes are synthesized (see fake_cudnn.cpp for which, and the workspace
// policy).
#include "cudnn_internal.h"

using namespace fkdnn;

namespace {

// ---------------------------------------------------------------------------
// backend descriptors
// ---------------------------------------------------------------------------
size_t elem_size(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_INT64: case CUDNN_TYPE_DOUBLE: case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return 8;
    case CUDNN_TYPE_BOOLEAN: case CUDNN_TYPE_CHAR:
      return 1;
    case CUDNN_TYPE_FRACTION:
      return sizeof(cudnnFraction_t);
    default:  // FLOAT, INT32 and every enum type
      return 4;
  }
}

struct Attr {
  cudnnBackendAttributeType_t type;
  int64_t count;
  std::vector<uint8_t> bytes;
};

constexpr uint32_t kDescMagic = 0xBAC4E7D;
struct Desc {
  uint32_t magic = kDescMagic;
  cudnnBackendDescriptorType_t type;
  bool finalized = false;
  std::map<int, Attr> attrs;
  explicit Desc(cudnnBackendDescriptorType_t t) : type(t) {}
};

std::mutex g_mu;  // guards g_live and every Desc
std::unordered_set<const Desc*>& live() {
  static auto* s = new std::unordered_set<const Desc*>();
  return *s;
}
Desc* D(cudnnBackendDescriptor_t d) {
  Desc* p = reinterpret_cast<Desc*>(d);
  if (!p || !live().count(p) || p->magic != kDescMagic) return nullptr;
  return p;
}

void put(Desc* d, int name, cudnnBackendAttributeType_t type, int64_t count, const void* data) {
  Attr a{type, count, {}};
  size_t n = static_cast<size_t>(count) * elem_size(type);
  a.bytes.resize(n);
  if (n && data) memcpy(a.bytes.data(), data, n);
  d->attrs[name] = std::move(a);
}
void put_i64(Desc* d, int name, int64_t v) { put(d, name, CUDNN_TYPE_INT64, 1, &v); }
void put_desc(Desc* d, int name, const Desc* v) {
  const void* p = v;
  put(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
}

const Attr* find(const Desc* d, int name) {
  auto it = d->attrs.find(name);
  return it == d->attrs.end() ? nullptr : &it->second;
}

void copy_state(const Desc* src, Desc* dst) {
  if (src == dst) return;
  dst->attrs = src->attrs;
  dst->finalized = src->finalized;
}

const char* type_name(cudnnBackendDescriptorType_t t);

// Write `count` elements from `src` (already in the requested element type).
cudnnStatus_t emit(const Attr& a, cudnnBackendAttributeType_t want, int64_t requested,
                   int64_t* elementCount, void* out) {
  if (elementCount) *elementCount = a.count;
  if (!out || requested <= 0) return CUDNN_STATUS_SUCCESS;
  int64_t n = std::min(requested, a.count);
  if (a.type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    if (want != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
    auto** dst = static_cast<cudnnBackendDescriptor_t*>(out);
    for (int64_t i = 0; i < n; ++i) {
      const Desc* s = nullptr;
      memcpy(&s, a.bytes.data() + i * 8, 8);
      Desc* d = D(dst[i]);
      const Desc* sv = D(reinterpret_cast<cudnnBackendDescriptor_t>(const_cast<Desc*>(s)));
      if (d && sv) {
        copy_state(sv, d);
      } else if (!d) {
        // caller passed no descriptor to fill: hand back the pointer itself
        dst[i] = reinterpret_cast<cudnnBackendDescriptor_t>(const_cast<Desc*>(s));
      }
    }
    return CUDNN_STATUS_SUCCESS;
  }
  size_t es = elem_size(want);
  if (es != elem_size(a.type)) {
    // e.g. FLOAT set, DOUBLE requested: convert scalars
    if ((a.type == CUDNN_TYPE_FLOAT || a.type == CUDNN_TYPE_DOUBLE) &&
        (want == CUDNN_TYPE_FLOAT || want == CUDNN_TYPE_DOUBLE)) {
      for (int64_t i = 0; i < n; ++i) {
        double v = a.type == CUDNN_TYPE_FLOAT ? reinterpret_cast<const float*>(a.bytes.data())[i]
                                              : reinterpret_cast<const double*>(a.bytes.data())[i];
        if (want == CUDNN_TYPE_FLOAT) static_cast<float*>(out)[i] = static_cast<float>(v);
        else static_cast<double*>(out)[i] = v;
      }
      return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
  }
  memcpy(out, a.bytes.data(), static_cast<size_t>(n) * es);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emit_i64(int64_t v, int64_t requested, int64_t* elementCount, void* out) {
  if (elementCount) *elementCount = 1;
  if (out && requested >= 1) *static_cast<int64_t*>(out) = v;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t emit_empty(int64_t* elementCount) {
  if (elementCount) *elementCount = 0;
  return CUDNN_STATUS_SUCCESS;
}

std::string plan_json(const Desc* plan) {
  int64_t eng = 0;
  if (const Attr* c = find(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)) {
    const Desc* cfg = nullptr;
    memcpy(&cfg, c->bytes.data(), 8);
    cfg = D(reinterpret_cast<cudnnBackendDescriptor_t>(const_cast<Desc*>(cfg)));
    if (cfg)
      if (const Attr* e = find(cfg, CUDNN_ATTR_ENGINECFG_ENGINE)) {
        const Desc* en = nullptr;
        memcpy(&en, e->bytes.data(), 8);
        en = D(reinterpret_cast<cudnnBackendDescriptor_t>(const_cast<Desc*>(en)));
        if (en)
          if (const Attr* gi = find(en, CUDNN_ATTR_ENGINE_GLOBAL_INDEX))
            memcpy(&eng, gi->bytes.data(), 8);
      }
  }
  return "{\"fake_cudnn\":true,\"engineId\":" + std::to_string(eng) + ",\"knobs\":[]}";
}

// Synthesized read-only attributes. Returns true when handled.
bool synthesize(Desc* d, int name, int64_t requested,
                int64_t* elementCount, void* out, cudnnStatus_t* st) {
  *st = CUDNN_STATUS_SUCCESS;
  switch (d->type) {
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      if (name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
        *st = emit_i64(n_engines(), requested, elementCount, out);
        return true;
      }
      return false;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
        int64_t n = n_engines();
        if (elementCount) *elementCount = n;
        if (!out || requested <= 0) return true;
        const Attr* og = find(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
        auto** dst = static_cast<cudnnBackendDescriptor_t*>(out);
        for (int64_t i = 0; i < std::min(n, requested); ++i) {
          Desc* cfg = D(dst[i]);
          if (!cfg) continue;
          // engine descriptor owned by the fake (never freed: tiny)
          Desc* eng = new Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
          live().insert(eng);
          if (og) eng->attrs[CUDNN_ATTR_ENGINE_OPERATION_GRAPH] = *og;
          put_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, i);
          eng->finalized = true;
          cfg->attrs.clear();
          put_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng);
          cfg->finalized = true;
        }
        return true;
      }
      return false;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      if (name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES && !find(d, name)) { *st = emit_empty(elementCount); return true; }
      if (name == CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO) { *st = emit_empty(elementCount); return true; }
#if FK_CUDNN_9_10
      if (name == CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE) {
        *st = emit_i64(static_cast<int64_t>(ws_conv()), requested, elementCount, out);
        return true;
      }
      if (name == CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED) { *st = emit_i64(0, requested, elementCount, out); return true; }
#endif
      return false;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      if (name == CUDNN_ATTR_ENGINE_KNOB_INFO || name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE ||
          name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE || name == CUDNN_ATTR_ENGINE_LAYOUT_INFO) {
        if (!find(d, name)) { *st = emit_empty(elementCount); return true; }
        return false;
      }
      if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX && !find(d, name)) { *st = emit_i64(0, requested, elementCount, out); return true; }
      if (name == CUDNN_ATTR_ENGINE_SM_COUNT_TARGET && !find(d, name)) { *st = emit_i64(0, requested, elementCount, out); return true; }
      return false;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
        *st = emit_i64(static_cast<int64_t>(ws_conv()), requested, elementCount, out);
        return true;
      }
      if (name == CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS ||
          name == CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS) {
        *st = emit_empty(elementCount);
        return true;
      }
      if (name == CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION) {
        std::string j = plan_json(d);
        int64_t n = static_cast<int64_t>(j.size()) + 1;  // with the NUL
        if (elementCount) *elementCount = n;
        if (out && requested > 0) {
          int64_t k = std::min(requested, n);
          memcpy(out, j.c_str(), static_cast<size_t>(k));
          if (k < n) static_cast<char*>(out)[k - 1] = 0;
        }
        return true;
      }
      return false;
    default:
      return false;
  }
}

const char* type_name(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: return "POINTWISE";
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: return "CONVOLUTION";
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return "ENGINE";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return "ENGINECFG";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return "ENGINEHEUR";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return "EXECUTION_PLAN";
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: return "KNOB_CHOICE";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: return "OP_CONV_FWD";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return "OP_CONV_BWD_FILTER";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return "OP_CONV_BWD_DATA";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return "OP_POINTWISE";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return "OPERATIONGRAPH";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return "VARIANT_PACK";
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return "TENSOR";
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR: return "MATMUL";
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return "OP_MATMUL";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return "OP_REDUCTION";
#if FK_CUDNN_9_10
    case CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR: return "KERNEL_CACHE";
    case CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR: return "DEVICEPROP";
#endif
#if CUDNN_VERSION >= 91300  // the SDPA operation descriptors came with cuDNN 9.13
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR: return "OP_SDPA_FWD";
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR: return "OP_SDPA_BWD";
#endif
    default: return "OTHER";
  }
}

struct Stats {
  std::atomic<uint64_t> executes{0}, plans{0};
};
Stats g_stats;

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------
// backend (graph) API
// ---------------------------------------------------------------------------
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* desc) {
  FK_TRACE();
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  auto* d = new Desc(type);
  {
    std::lock_guard<std::mutex> g(g_mu);
    live().insert(d);
  }
  *desc = reinterpret_cast<cudnnBackendDescriptor_t>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) {
  FK_TRACE();
  std::lock_guard<std::mutex> g(g_mu);
  Desc* d = D(desc);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  live().erase(d);
  d->magic = 0;
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t desc) {
  FK_TRACE();
  std::lock_guard<std::mutex> g(g_mu);
  Desc* d = D(desc);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->attrs.clear();
  d->finalized = false;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* elems) {
  FK_TRACE();
  std::lock_guard<std::mutex> g(g_mu);
  Desc* d = D(desc);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  if (count < 0 || (count > 0 && !elems)) return CUDNN_STATUS_BAD_PARAM;
  put(d, name, type, count, elems);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
  FK_TRACE();
  std::lock_guard<std::mutex> g(g_mu);
  Desc* d = D(desc);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->finalized = true;
  if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) g_stats.plans++;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* elementCount, void* out) {
  FK_TRACE();
  std::lock_guard<std::mutex> g(g_mu);
  Desc* d = D(desc);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st;
  if (synthesize(d, name, requested, elementCount, out, &st)) return st;
  if (const Attr* a = find(d, name)) return emit(*a, type, requested, elementCount, out);
  if (fk::verbose())
    fprintf(stderr, "[fake_cudnn] GetAttribute of unset attribute %d on %s descriptor -> 0 elements\n",
            static_cast<int>(name), type_name(d->type));
  return emit_empty(elementCount);
}
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t vpack) {
  FK_TRACE();
  if (!H(handle)) return CUDNN_STATUS_BAD_PARAM;
  std::lock_guard<std::mutex> g(g_mu);
  if (!D(plan) || !D(vpack)) return CUDNN_STATUS_BAD_PARAM;
  g_stats.executes++;
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"

