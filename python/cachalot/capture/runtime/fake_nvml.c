/* fake_nvml.c -- minimal stand-in for libnvidia-ml.so.1.
 *
 * Why it exists: libc10_cuda.so dlopen()s "libnvidia-ml.so.1" and, when it is
 * found, resolves a fixed list of NVML entry points (TORCH_INTERNAL_ASSERT if
 * one is missing). When it is NOT found, every NVML pointer stays null, and
 * c10::cuda::get_fabric_access() -- called by expandable segments on their
 * first map -- calls nvmlInit_v2 through a null pointer (SIGSEGV). Real GPU
 * hosts always have NVML, so we provide one that reports "no NVLink, no
 * fabric" (nvmlDeviceGetGpuFabricInfoV is deliberately absent, which c10
 * treats as "fabric handles unsupported" -> POSIX fd handles).
 *
 * Types are plain C equivalents of the NVML ABI (nvmlReturn_t is an int enum,
 * nvmlDevice_t an opaque pointer); no NVIDIA header is used.
 *
 * Provenance: copied unchanged from the cachalot team's shared/fakegpu for
 * `cachalot capture`, which compiles it at first use (capture/build.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3

static int device_count(void) {
  const char* dc = getenv("FAKE_CUDA_DEVICE_COUNT");
  int n = dc && *dc ? atoi(dc) : 1;
  return n < 0 ? 0 : n;
}

static char g_devices[64];

int nvmlInit_v2(void) { return NVML_SUCCESS; }
int nvmlInit(void) { return NVML_SUCCESS; }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return NVML_SUCCESS; }
int nvmlShutdown(void) { return NVML_SUCCESS; }

const char* nvmlErrorString(int result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    default: return "Unknown Error";
  }
}

int nvmlSystemGetCudaDriverVersion_v2(int* v) {
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  *v = 13020;
  return NVML_SUCCESS;
}
int nvmlSystemGetCudaDriverVersion(int* v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = (unsigned)device_count();
  return NVML_SUCCESS;
}
int nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!device || (int)index >= device_count() || index >= sizeof g_devices)
    return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}
int nvmlDeviceGetHandleByIndex(unsigned int index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* fake_cudart reports pciBusID = 0x18 + ordinal, domain 0, device 0 */
int nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, void** device) {
  unsigned dom = 0, bus = 0, dev = 0;
  if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
  if (sscanf(pciBusId, "%x:%x:%x", &dom, &bus, &dev) != 3) return NVML_ERROR_INVALID_ARGUMENT;
  int idx = (int)bus - 0x18;
  if (idx < 0 || idx >= device_count() || idx >= (int)sizeof g_devices)
    return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[idx];
  return NVML_SUCCESS;
}
int nvmlDeviceGetHandleByPciBusId(const char* pciBusId, void** device) {
  return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

int nvmlDeviceGetNvLinkRemoteDeviceType(void* device, unsigned int link, int* type) {
  (void)device; (void)link; (void)type;
  return NVML_ERROR_NOT_SUPPORTED;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* device, unsigned int link, void* pci) {
  (void)device; (void)link; (void)pci;
  return NVML_ERROR_NOT_SUPPORTED;
}

/* no other processes on the fake GPU */
int nvmlDeviceGetComputeRunningProcesses(void* device, unsigned int* infoCount, void* infos) {
  (void)device; (void)infos;
  if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
  *infoCount = 0;
  return NVML_SUCCESS;
}
int nvmlDeviceGetComputeRunningProcesses_v2(void* d, unsigned int* c, void* i) {
  return nvmlDeviceGetComputeRunningProcesses(d, c, i);
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned int* c, void* i) {
  return nvmlDeviceGetComputeRunningProcesses(d, c, i);
}
