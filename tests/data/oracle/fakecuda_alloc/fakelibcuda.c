/* fakelibcuda.c -- stub "libcuda.so.1" (CUDA driver API) for the allocator mode of the fake
 * device. Copied from shared/reference/harness/fakecuda/fakelibcuda.c (libcaffe2_nvrtc.so links
 * libcuda.so.1; cuDevicePrimaryCtxGetState(active=1) makes the autograd engine treat the fake
 * device as initialised; module loading / kernel launches through the driver fail), plus the
 * virtual-memory calls PyTorch's expandable segments make (PYTORCH_CUDA_ALLOC_CONF=
 * expandable_segments:True), reached through cudaGetDriverEntryPointByVersion:
 *  - cuMemAddressReserve / cuMemAddressFree: anonymous mmap(PROT_NONE, MAP_NORESERVE) address
 *    space, never touched;
 *  - cuMemCreate / cuMemRelease: a handle that only records its size; the bytes created and not
 *    released are the "physical" memory in use (fakecuda_driver_mapped_bytes, which the runtime
 *    shim adds into cudaMemGetInfo); creation beyond 80 GB fails (out of memory);
 *  - cuMemMap / cuMemUnmap / cuMemSetAccess: bookkeeping only, succeed;
 *  - cuMemGetAllocationGranularity: 2 MiB, as on an H100;
 *  - cuMemGetAddressRange: the reserved range, or the cudaMalloc range the runtime shim handed out;
 *  - cuMemsetD32Async / cuStreamWriteValue32 succeed (device work, never run); cuLogsRegisterCallback
 *    succeeds (no log is ever written); the rest of what libc10_cuda.so looks up (green contexts,
 *    multicast, shareable handles for IPC) fails with CUDA_ERROR_NOT_SUPPORTED.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <pthread.h>

#include <dlfcn.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext;
typedef unsigned long long CUdeviceptr; typedef unsigned long long CUmemGenericAllocationHandle;
#define FAIL 999  /* CUDA_ERROR_UNKNOWN */
#define OOM 2     /* CUDA_ERROR_OUT_OF_MEMORY */
#define TOTAL_MEM 85520809984ULL
CUresult cuInit(unsigned int f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13020; return 0; }
CUresult cuDeviceGetCount(int *c) { *c = 1; return 0; }
CUresult cuDeviceGet(CUdevice *d, int o) { *d = 0; return 0; }
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) { *flags = 0; *active = 1; return 0; }
static int g_ctx;
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = &g_ctx; return 0; }
CUresult cuCtxGetCurrent(CUcontext *c) { *c = &g_ctx; return 0; }
CUresult cuCtxSetCurrent(CUcontext c) { return 0; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attrib, CUdevice d) {
  switch (attrib) { case 75: *v = 9; break; case 76: *v = 0; break; case 16: *v = 132; break; default: *v = 0; }
  return 0;
}
CUresult cuGetErrorString(CUresult e, const char **s) { *s = "fakecuda: no real GPU (driver stub)"; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = "CUDA_ERROR_FAKECUDA"; return 0; }

/* ---- virtual memory management (expandable segments) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long g_mapped = 0;
unsigned long long fakecuda_driver_mapped_bytes(void) { return g_mapped; }
#define MAXRES 256
static CUdeviceptr g_res_base[MAXRES]; static size_t g_res_size[MAXRES]; static int g_nres = 0;
static void note_reserve(CUdeviceptr b, size_t n) { pthread_mutex_lock(&g_mu); if (g_nres < MAXRES) { g_res_base[g_nres] = b; g_res_size[g_nres++] = n; } pthread_mutex_unlock(&g_mu); }
CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int opt) { *g = 2u << 20; return 0; }
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long fl) {
  size_t a = align > (2u << 20) ? align : (2u << 20);
  void *m = mmap(NULL, size + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return OOM;
  *p = ((CUdeviceptr)m + a - 1) & ~(CUdeviceptr)(a - 1);
  note_reserve(*p, size);
  return 0;
}
CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { return 0; /* leaked address space: harmless */ }
CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
  for (int i = 0; i < g_nres; i++) if (p >= g_res_base[i] && p < g_res_base[i] + g_res_size[i]) {
    if (base) *base = g_res_base[i]; if (size) *size = g_res_size[i]; return 0; }
  int (*rt)(unsigned long long, unsigned long long *, unsigned long long *) =
      (int (*)(unsigned long long, unsigned long long *, unsigned long long *))dlsym(RTLD_DEFAULT, "fakecuda_range_of");
  unsigned long long b = 0, n = 0;
  if (rt && rt(p, &b, &n)) { if (base) *base = b; if (size) *size = n; return 0; }
  return 1; /* CUDA_ERROR_INVALID_VALUE */
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) { return cuMemGetAddressRange(base, size, p); }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n, void *s) { return 0; }
CUresult cuStreamWriteValue32(void *s, CUdeviceptr a, unsigned int v, unsigned int f) { return 0; }
static int g_log;
CUresult cuLogsRegisterCallback(void *cb, void *u, void **h) { if (h) *h = &g_log; return 0; }
CUresult cuLogsUnregisterCallback(void *h) { return 0; }
#define NOTSUP(name) CUresult name() { return 801; }
NOTSUP(cuCtxFromGreenCtx) NOTSUP(cuCtxPopCurrent) NOTSUP(cuCtxPushCurrent) NOTSUP(cuDevResourceGenerateDesc)
NOTSUP(cuDevSmResourceSplitByCount) NOTSUP(cuDeviceGetDevResource) NOTSUP(cuGreenCtxCreate) NOTSUP(cuGreenCtxDestroy)
NOTSUP(cuGreenCtxStreamCreate) NOTSUP(cuMemExportToShareableHandle) NOTSUP(cuMemImportFromShareableHandle)
NOTSUP(cuMemGetAllocationPropertiesFromHandle) NOTSUP(cuMemRetainAllocationHandle) NOTSUP(cuMulticastAddDevice)
NOTSUP(cuMulticastBindMem) NOTSUP(cuMulticastCreate) NOTSUP(cuMulticastUnbind)
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop, unsigned long long fl) {
  pthread_mutex_lock(&g_mu);
  if (g_mapped + size > TOTAL_MEM) { pthread_mutex_unlock(&g_mu); return OOM; }
  g_mapped += size; pthread_mutex_unlock(&g_mu);
  size_t *rec = malloc(sizeof(size_t)); *rec = size; *h = (CUmemGenericAllocationHandle)rec;
  return 0;
}
CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  size_t *rec = (size_t *)h; pthread_mutex_lock(&g_mu); g_mapped -= *rec; pthread_mutex_unlock(&g_mu); free(rec); return 0;
}
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h, unsigned long long fl) { return 0; }
CUresult cuMemUnmap(CUdeviceptr p, size_t size) { return 0; }
CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count) { return 0; }

/* ---- everything that would run a kernel fails (as the harness stub) */
CUresult cuFuncGetAttribute(void) { return FAIL; }
CUresult cuFuncSetAttribute(void) { return FAIL; }
CUresult cuFuncSetCacheConfig(void) { return FAIL; }
CUresult cuLaunchCooperativeKernel(void) { return FAIL; }
CUresult cuLaunchKernel(void) { return FAIL; }
CUresult cuLinkAddData_v2(void) { return FAIL; }
CUresult cuLinkComplete(void) { return FAIL; }
CUresult cuLinkCreate_v2(void) { return FAIL; }
CUresult cuModuleGetFunction(void) { return FAIL; }
CUresult cuModuleLoad(void) { return FAIL; }
CUresult cuModuleLoadData(void) { return FAIL; }
CUresult cuModuleLoadDataEx(void) { return FAIL; }
CUresult cuModuleUnload(void) { return FAIL; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(void) { return FAIL; }
CUresult cuPointerGetAttribute(void) { return FAIL; }
CUresult cuTensorMapEncodeTiled(void) { return FAIL; }
