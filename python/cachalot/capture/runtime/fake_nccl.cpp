// fake_nccl.cpp -- libnccl.so.2 of the capture runtime: NCCL's host API over no network.
//
// torch's ProcessGroupNCCL runs unchanged on it. Every rank is its own process; a
// communicator is created locally from (nranks, rank) with no exchange, so nothing waits
// for a peer and nothing can hang. Collectives, send/recv and group calls check their
// arguments and complete at once: the capture runtime's streams complete every operation
// when it is enqueued, so a collective is in stream order and torch's events after it
// (work.wait(), record_stream, the allocator's stashed frees) see it done. No data moves.
//
// Values: device memory holds no data, but the runtime keeps the bytes a program copied to the
// device itself (cudart_shadow.cpp). A collective hands each rank its own contribution as the
// result (all-gather: the rank's buffer in every slot; broadcast, all-reduce: the rank's own
// buffer), as in a job whose ranks agree, so DDP's parameter check, its bucket indices and the
// object collectives read back sensible values.
//
// What NCCL itself would allocate on the device (its channels' buffers) is not allocated:
// the prediction adds it by formula from the communicators this library logs. With
// CACHALOT_NCCL_LOG=FILE each communicator's creation and end is appended to FILE as one
// JSON line ({"pid","comm","event","nranks","rank","device","parent","color"}), O_APPEND so
// that the ranks of a job can share the file. ncclMemAlloc (torch's NCCL memory pool)
// allocates through the runtime's cudaMalloc, so that memory is the device's like any.
//
// Names torch imports that are not written here (the device API: ncclDevCommCreate, ...) are
// generated stubs returning ncclInvalidUsage (capture/build.py).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <set>
#include <string>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

// Revoke, timeouts, memory statistics, windows with a base and signal waits are NCCL 2.29's
// (torch 2.13 and 2.15); against older headers (torch 2.9: NCCL 2.27) they are generated stubs.
// ncclTimeout is 2.30's (torch 2.15). fp8 types, put/signal over windows and simulated group
// ends are in 2.27 (torch 2.9) and not in 2.20 (torch 2.4).
#define FK_NCCL_2_27 (NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0))
#define FK_NCCL_2_29 (NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0))
#define FK_NCCL_2_30 (NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0))

extern "C" void fakecuda_shadow_copy(void* dst, const void* src, size_t n);
extern "C" int fakecuda_shadow_read(const void* src, size_t n, void* out);
extern "C" void fakecuda_shadow_write(void* dst, const void* data, size_t n);

struct ncclComm {
  int nranks;
  int rank;
  int device;
  uint64_t id;
  uint64_t parent;  // 0 for a communicator made by an init call
  bool ended;
  uint64_t key;      // the same in every rank of the communicator (from its unique id)
  uint64_t bcasts;   // broadcasts so far: with `key`, names a broadcast across the ranks
};

namespace {

std::mutex g_mu;
std::set<ncclComm*> g_comms;  // the live communicators: anything else is not one
std::atomic<uint64_t> g_next_id{1};
thread_local int t_group_depth = 0;
thread_local const char* t_last_error = "";

void log_comm(const ncclComm* c, const char* event, int color) {
  const char* path = getenv("CACHALOT_NCCL_LOG");
  if (!path || !*path) return;
  char line[320];
  int n = snprintf(line, sizeof line,
                   "{\"pid\":%d,\"comm\":%llu,\"event\":\"%s\",\"nranks\":%d,\"rank\":%d,"
                   "\"device\":%d,\"parent\":%llu,\"color\":%d}\n",
                   (int)getpid(), (unsigned long long)c->id, event, c->nranks, c->rank, c->device,
                   (unsigned long long)c->parent, color);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (n > 0 && write(fd, line, (size_t)n) < 0) {
    // a log that cannot be written leaves the prediction without NCCL's lines; the run goes on
  }
  close(fd);
}

ncclResult_t fail(ncclResult_t r, const char* why) {
  t_last_error = why;
  return r;
}

bool live(const ncclComm* c) {
  std::lock_guard<std::mutex> g(g_mu);
  return g_comms.count(const_cast<ncclComm*>(c)) == 1 && !c->ended;
}

uint64_t fnv(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

ncclResult_t make(ncclComm_t* out, int nranks, int rank, uint64_t parent, int color,
                  uint64_t key) {
  if (!out) return fail(ncclInvalidArgument, "comm is NULL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "rank must be in [0, nranks)");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fail(ncclUnhandledCudaError, "no device");
  auto* c = new ncclComm{nranks, rank, device, g_next_id++, parent, false, key, 0};
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_comms.insert(c);
  }
  log_comm(c, parent ? "split" : "init", color);
  *out = c;
  return ncclSuccess;
}

ncclResult_t end(ncclComm_t c, const char* event) {
  if (!c) return ncclSuccess;  // NCCL accepts a NULL communicator here
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_comms.count(c)) return fail(ncclInvalidArgument, "not a communicator");
  g_comms.erase(c);
  log_comm(c, event, -1);
  delete c;
  return ncclSuccess;
}

// The checks every operation on a communicator makes; `peer` -1 when there is none.
ncclResult_t op(const ncclComm* c, ncclDataType_t type, int peer) {
  if (!live(c)) return fail(ncclInvalidArgument, "invalid or ended communicator");
  if ((int)type < 0 || (int)type >= (int)ncclNumTypes)
    return fail(ncclInvalidArgument, "invalid data type");
  if (peer >= c->nranks) return fail(ncclInvalidArgument, "peer or root outside the communicator");
  return ncclSuccess;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
#if FK_NCCL_2_27
    case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
#endif
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

// The rank's own bytes as the result: `src` into `dst` (nothing when they are the same).
void own(void* dst, const void* src, size_t count, ncclDataType_t t) {
  if (dst && src && dst != src) fakecuda_shadow_copy(dst, src, count * type_size(t));
}

}  // namespace

#define API extern "C" __attribute__((visibility("default")))

API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "uniqueId is NULL");
  memset(id, 0, sizeof *id);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t parts[3] = {(uint64_t)getpid(), (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30),
                       g_next_id.fetch_add(0)};
  memcpy(id->internal, parts, sizeof parts);
  return ncclSuccess;
}

API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t*) {
  return make(comm, nranks, rank, 0, -1, fnv(&id, sizeof id));
}
API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}
API ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                          ncclUniqueId* ids, ncclConfig_t*) {
  if (nId < 1 || !ids) return fail(ncclInvalidArgument, "no unique ids");
  return make(comm, nranks, rank, 0, -1, fnv(ids, sizeof *ids));
}
API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return fail(ncclInvalidArgument, "no communicators to make");
  int old = 0;
  cudaGetDevice(&old);
  for (int i = 0; i < ndev; i++) {
    cudaSetDevice(devlist ? devlist[i] : i);
    ncclResult_t r = make(&comms[i], ndev, i, 0, -1, fnv(comms, sizeof comms));
    if (r != ncclSuccess) {
      cudaSetDevice(old);
      return r;
    }
  }
  cudaSetDevice(old);
  return ncclSuccess;
}

// A split or shrink needs every rank's color to know the new size, which no rank has here;
// the new communicator keeps the parent's size, and its rank is the key torch passes (the
// rank in the new group). The log says "split" with that rank, and the prediction takes the
// size from the groups torch made in the process (capture/_boot.py, ranks.py).
API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                               ncclConfig_t*) {
  if (!live(comm)) return fail(ncclInvalidArgument, "invalid parent communicator");
  if (!newcomm) return fail(ncclInvalidArgument, "newcomm is NULL");
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  if (color < 0) return fail(ncclInvalidArgument, "color must be >= 0 or NCCL_SPLIT_NOCOLOR");
  int rank = key >= 0 && key < comm->nranks ? key : comm->rank;
  return make(newcomm, comm->nranks, rank, comm->id, color, fnv(&color, sizeof color, comm->key));
}
API ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int nexclude, ncclComm_t* newcomm,
                                ncclConfig_t*, int) {
  if (!live(comm)) return fail(ncclInvalidArgument, "invalid parent communicator");
  if (!newcomm || nexclude < 0 || (nexclude && !exclude))
    return fail(ncclInvalidArgument, "bad shrink arguments");
  int below = 0;
  for (int i = 0; i < nexclude; i++) {
    if (exclude[i] == comm->rank) {
      *newcomm = nullptr;
      return ncclSuccess;
    }
    below += exclude[i] < comm->rank;
  }
  if (comm->nranks - nexclude < 1) return fail(ncclInvalidArgument, "nothing left");
  return make(newcomm, comm->nranks - nexclude, comm->rank - below, comm->id, 0,
              fnv(exclude, sizeof(int) * (size_t)nexclude, comm->key));
}
API ncclResult_t ncclCommGrow(ncclComm_t comm, int nranks, const ncclUniqueId*, int rank,
                              ncclComm_t* newcomm, ncclConfig_t*) {
  if (comm && !live(comm)) return fail(ncclInvalidArgument, "invalid parent communicator");
  return make(newcomm, nranks, rank, comm ? comm->id : 0, 0,
              fnv(&nranks, sizeof nranks, comm ? comm->key : 0));
}
API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* id) {
  if (!live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  return ncclGetUniqueId(id);
}

API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm && !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  return ncclSuccess;
}
API ncclResult_t ncclCommDestroy(ncclComm_t comm) { return end(comm, "destroy"); }
API ncclResult_t ncclCommAbort(ncclComm_t comm) { return end(comm, "abort"); }
#if FK_NCCL_2_29
API ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  if (!live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  if (flags != NCCL_REVOKE_DEFAULT) return fail(ncclInvalidArgument, "revokeFlags must be 0");
  return ncclSuccess;
}
#endif
API ncclResult_t ncclCommSuspend(ncclComm_t comm, int) {
  return live(comm) ? ncclSuccess : fail(ncclInvalidArgument, "invalid communicator");
}
API ncclResult_t ncclCommResume(ncclComm_t comm) {
  return live(comm) ? ncclSuccess : fail(ncclInvalidArgument, "invalid communicator");
}

API const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
#if FK_NCCL_2_30
    case ncclTimeout: return "NCCL operation timed out";
#endif
    default: return "unknown result code";
  }
}
API const char* ncclGetLastError(ncclComm_t) { return t_last_error; }
API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  if (!err) return fail(ncclInvalidArgument, "asyncError is NULL");
  if (!live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  *err = ncclSuccess;
  return ncclSuccess;
}
API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!count || !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  *count = comm->nranks;
  return ncclSuccess;
}
API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!device || !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  *device = comm->device;
  return ncclSuccess;
}
API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!rank || !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  *rank = comm->rank;
  return ncclSuccess;
}

#if FK_NCCL_2_29
// NCCL's own device memory is not allocated here (see the top): every statistic is 0.
API ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  if (!value || !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  if ((int)stat < 0 || (int)stat > (int)ncclStatGpuMemTotal)
    return fail(ncclInvalidArgument, "unknown statistic");
  *value = 0;
  return ncclSuccess;
}
#endif

API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return fail(ncclInvalidArgument, "ptr is NULL");
  if (size == 0) {
    *ptr = nullptr;
    return ncclSuccess;
  }
  return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess
                                              : fail(ncclUnhandledCudaError, "cudaMalloc failed");
}
API ncclResult_t ncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  return cudaFree(ptr) == cudaSuccess ? ncclSuccess : fail(ncclUnhandledCudaError, "cudaFree failed");
}

// Registration hands back a handle that only has to be told apart from NULL.
API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t, void** handle) {
  if (!handle || !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  *handle = buff ? buff : reinterpret_cast<void*>(comm);
  return ncclSuccess;
}
API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void*) {
  return live(comm) ? ncclSuccess : fail(ncclInvalidArgument, "invalid communicator");
}
#if FK_NCCL_2_29
struct ncclWindow_vidmem {
  void* base;
};
API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t, ncclWindow_t* win,
                                        int) {
  if (!win || !live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  *win = new ncclWindow_vidmem{buff};
  return ncclSuccess;
}
API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (!live(comm)) return fail(ncclInvalidArgument, "invalid communicator");
  delete win;
  return ncclSuccess;
}
API ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** out) {
  if (!out || !win || !live(comm)) return fail(ncclInvalidArgument, "invalid window");
  *out = win->base;
  return ncclSuccess;
}
#endif

API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op_out, void*, ncclDataType_t type,
                                          ncclScalarResidence_t, ncclComm_t comm) {
  if (!op_out) return fail(ncclInvalidArgument, "op is NULL");
  ncclResult_t r = op(comm, type, -1);
  if (r != ncclSuccess) return r;
  *op_out = static_cast<ncclRedOp_t>(ncclNumOps);
  return ncclSuccess;
}
API ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t comm) {
  return live(comm) ? ncclSuccess : fail(ncclInvalidArgument, "invalid communicator");
}

API ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                            ncclRedOp_t, int root, ncclComm_t comm, cudaStream_t) {
  ncclResult_t r = op(comm, type, root);
  if (r == ncclSuccess && comm->rank == root) own(recv, send, count, type);
  return r;
}
// A broadcast's result is the root's bytes. When they are known (cudart_shadow.cpp) and
// CACHALOT_NCCL_SHARE names a folder, the root leaves them in a file named by the
// communicator and the broadcast's number, which every other rank reads (waiting at most
// kShareWaitMs for the root to get there: a rank never hangs on another); otherwise each rank
// keeps its own bytes. Broadcasts of "rank 0's value" (a list length, a seed, a flag) then
// agree across the ranks as on a GPU.
static constexpr int kShareWaitMs = 10000;
static constexpr size_t kShareMax = 1 << 20;

// A job larger than the machine (cachalot capture --world-size) executes only some ranks
// (CACHALOT_NCCL_EXECUTED, of CACHALOT_NCCL_WORLD): a root that is not one of them never
// leaves its bytes. The ranks of the job's world communicator are its global ranks; those of
// any other are not known here, so its broadcasts share nothing. Either way nothing waits.
static bool root_may_come(const ncclComm* comm, int root) {
  const char* executed = getenv("CACHALOT_NCCL_EXECUTED");
  const char* world = getenv("CACHALOT_NCCL_WORLD");
  if (!executed || !*executed || !world) return true;  // every rank runs
  if (comm->parent != 0 || comm->nranks != atoi(world)) return false;
  for (const char* p = executed; *p;) {
    char* end = nullptr;
    long r = strtol(p, &end, 10);
    if (end == p) break;
    if (r == root) return true;
    p = *end == ',' ? end + 1 : end;
  }
  return false;
}

static void broadcast_values(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                      ncclComm_t comm) {
  size_t n = count * type_size(type);
  uint64_t seq = ++comm->bcasts;
  const char* dir = getenv("CACHALOT_NCCL_SHARE");
  if (!dir || !*dir || n == 0 || n > kShareMax || comm->nranks == 1 ||
      !root_may_come(comm, root)) {
    own(recv, send, count, type);
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/b%016llx-%llu", dir, (unsigned long long)comm->key,
           (unsigned long long)seq);
  std::string buf(n + 1, '\0');
  if (comm->rank == root) {
    own(recv, send, count, type);
    buf[0] = (char)fakecuda_shadow_read(recv, n, &buf[1]);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    bool ok = write(fd, buf.data(), buf[0] ? buf.size() : 1) == (ssize_t)(buf[0] ? buf.size() : 1);
    close(fd);
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
    return;
  }
  for (int waited = 0; waited < kShareWaitMs; waited += 2) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t got = read(fd, &buf[0], buf.size());
      close(fd);
      if (got >= 1 && buf[0] && (size_t)got == buf.size())
        fakecuda_shadow_write(recv, &buf[1], n);
      else
        fakecuda_shadow_write(recv, nullptr, n);  // the root's bytes are not known: zeros
      return;
    }
    usleep(2000);
  }
  own(recv, send, count, type);  // the root never got there: the rank's own bytes
}

API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t) {
  ncclResult_t r = op(comm, type, root);
  if (r == ncclSuccess && root >= 0) broadcast_values(buff, buff, count, type, root, comm);
  return r;
}
API ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                               int root, ncclComm_t comm, cudaStream_t) {
  ncclResult_t r = op(comm, type, root);
  if (r == ncclSuccess && root >= 0) broadcast_values(send, recv, count, type, root, comm);
  return r;
}
API ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t) {
  ncclResult_t r = op(comm, type, -1);
  if (r == ncclSuccess) own(recv, send, count, type);
  return r;
}
API ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count,
                                   ncclDataType_t type, ncclRedOp_t, ncclComm_t comm,
                                   cudaStream_t) {
  ncclResult_t r = op(comm, type, -1);
  if (r == ncclSuccess && send)
    own(recv, static_cast<const char*>(send) + comm->rank * count * type_size(type), count, type);
  return r;
}
API ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclComm_t comm, cudaStream_t) {
  ncclResult_t r = op(comm, type, -1);
  if (r != ncclSuccess || !recv) return r;
  size_t bytes = count * type_size(type);
  const char* mine = send ? static_cast<const char*>(send)
                          : static_cast<const char*>(recv) + comm->rank * bytes;
  for (int i = 0; i < comm->nranks; i++) own(static_cast<char*>(recv) + i * bytes, mine, count, type);
  return r;
}
API ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t type,
                              ncclComm_t comm, cudaStream_t) {
  ncclResult_t r = op(comm, type, -1);
  if (r == ncclSuccess) own(recv, send, count * comm->nranks, type);
  return r;
}
API ncclResult_t ncclGather(const void*, void*, size_t, ncclDataType_t type, int root,
                            ncclComm_t comm, cudaStream_t) {
  return op(comm, type, root);
}
API ncclResult_t ncclScatter(const void*, void*, size_t, ncclDataType_t type, int root,
                             ncclComm_t comm, cudaStream_t) {
  return op(comm, type, root);
}
API ncclResult_t ncclSend(const void*, size_t, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t) {
  return op(comm, type, peer);
}
API ncclResult_t ncclRecv(void*, size_t, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t) {
  return op(comm, type, peer);
}
#if FK_NCCL_2_27
API ncclResult_t ncclPutSignal(const void*, size_t, ncclDataType_t type, int peer, ncclWindow_t,
                               size_t, int, int, unsigned int, ncclComm_t comm, cudaStream_t) {
  return op(comm, type, peer);
}
API ncclResult_t ncclSignal(int peer, int, int, unsigned int, ncclComm_t comm, cudaStream_t) {
  return op(comm, ncclInt8, peer);
}
#endif
#if FK_NCCL_2_29
API ncclResult_t ncclWaitSignal(int n, ncclWaitSignalDesc_t* descs, ncclComm_t comm,
                                cudaStream_t) {
  if (n < 0 || (n && !descs)) return fail(ncclInvalidArgument, "bad signal descriptors");
  return op(comm, ncclInt8, -1);
}
#endif

API ncclResult_t ncclGroupStart() {
  t_group_depth++;
  return ncclSuccess;
}
API ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  t_group_depth--;
  return ncclSuccess;
}
#if FK_NCCL_2_27
API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (info) info->estimatedTime = 0.0f;
  return ncclGroupEnd();
}
#endif
