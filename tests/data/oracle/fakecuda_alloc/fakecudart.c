/* fakecudart.c -- "allocator mode" of the oracle's fake-CUDA shim: an LD_PRELOAD stand-in for
 * the libcudart.so.13 calls PyTorch makes, so that REAL tensors (no FakeTensorMode) live on a
 * faked device 'cuda' and go through PyTorch's real CUDACachingAllocator.
 *
 * Derived from shared/reference/harness/fakecuda/fakecuda.c (device / stream / event bookkeeping,
 * the H100-like device properties); what differs:
 *  - cudaMalloc / cudaMallocAsync hand out ADDRESS SPACE ONLY: an anonymous
 *    mmap(PROT_NONE, MAP_NORESERVE) never touched by anyone, aligned to 2 MiB for >= 1 MiB
 *    requests and 512 B otherwise (as the CUDA driver aligns); cudaFree / cudaFreeAsync unmap it.
 *    cudaMemGetInfo reports free = total (80 GB, H100 SXM) - bytes handed out (cudaMalloc plus
 *    the driver stub's cuMemCreate bytes, for expandable segments). Allocation beyond the total
 *    fails with cudaErrorMemoryAllocation, as on a GPU.
 *  - kernels never run: cudaLaunchKernel, cudaLaunchKernelExC, __cudaLaunchKernel (CUDA 13 host
 *    stubs) return success; __cudaGetKernel returns a dummy handle. So every device value is
 *    garbage (untouched address space).
 *  - cudaMemcpy* and cudaMemset*: host->device, device->device and memsets are no-ops. A copy whose
 *    destination is host memory and source device memory (device->host, or cudaMemcpyDefault)
 *    writes ZEROS into the host buffer and is counted (fakecuda_d2h_count / _bytes), because the
 *    host may branch on it (.item(), nonzero, ...). Host->host copies are real memcpy.
 *  - pinned host memory (cudaHostAlloc / cudaMallocHost) is plain page-aligned malloc;
 *    cudaHostRegister/Unregister succeed; cudaPointerGetAttributes says device/host/unregistered
 *    from the ranges handed out here.
 *  - cudaFuncGetAttributes / occupancy queries answer plausible sm_90 values (1024 threads,
 *    blocks per SM = 2048/blockSize capped at 32); cudaFuncSetAttribute and
 *    cudaKernelSetAttributeForDevice succeed (no kernel is run anyway).
 *  - cudaStreamAddCallback / cudaLaunchHostFunc call the host function at once.
 *  - cudaGetDriverEntryPointByVersion returns the symbol from the stub libcuda.so.1 (fakelibcuda.c)
 *    when it has it (the virtual-memory calls expandable segments use), else "not found".
 *  - CUDA graphs, IPC, managed memory and cudaLibrary* loading are refused (not used by the
 *    training steps measured).
 * Build: see build.sh (version script fakecudart.map binds these to libcudart.so.13).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <cuda_runtime_api.h>

#define TOTAL_MEM 85520809984ULL /* 81559 MiB, as an H100 SXM reports */
static int g_dev = 0;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int verbose(void) { static int v = -1; if (v < 0) v = getenv("FAKECUDA_VERBOSE") != NULL; return v; }
static void note(const char *f) { if (verbose()) fprintf(stderr, "[fakecuda-alloc] %s\n", f); }

/* ------------------------------------------------------------------ device ranges */
typedef struct { uintptr_t base, user, len; size_t req; } Range; /* base/len: the mapping; user: pointer given out */
static Range *g_r = NULL; static size_t g_nr = 0, g_cap = 0;
static unsigned long long g_handed = 0, g_nmalloc = 0, g_nfree = 0, g_d2h = 0, g_d2h_bytes = 0, g_peak_handed = 0;

static int find_range_locked(uintptr_t p) {
  for (size_t i = 0; i < g_nr; i++) if (p >= g_r[i].user && p < g_r[i].user + (g_r[i].req ? g_r[i].req : 1)) return (int)i;
  return -1;
}
static int is_device_ptr(const void *p) { pthread_mutex_lock(&g_mu); int r = find_range_locked((uintptr_t)p) >= 0; pthread_mutex_unlock(&g_mu); return r; }

static unsigned long long driver_bytes(void) {
  static unsigned long long (*fn)(void) = NULL; static int tried = 0;
  if (!tried) { tried = 1; void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h) fn = (unsigned long long (*)(void))dlsym(h, "fakecuda_driver_mapped_bytes"); }
  return fn ? fn() : 0;
}

static cudaError_t dev_alloc(void **p, size_t n) {
  size_t align = n >= (1u << 20) ? (2u << 20) : 512;
  size_t len = (n ? n : 1) + align;
  len = (len + 4095) & ~(size_t)4095;
  pthread_mutex_lock(&g_mu);
  if (g_handed + driver_bytes() + n > TOTAL_MEM) { pthread_mutex_unlock(&g_mu); *p = NULL; return cudaErrorMemoryAllocation; }
  void *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) { pthread_mutex_unlock(&g_mu); *p = NULL; return cudaErrorMemoryAllocation; }
  uintptr_t u = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
  if (g_nr == g_cap) { g_cap = g_cap ? 2 * g_cap : 1024; g_r = realloc(g_r, g_cap * sizeof(Range)); }
  g_r[g_nr++] = (Range){(uintptr_t)m, u, len, n};
  g_handed += n; g_nmalloc++; if (g_handed > g_peak_handed) g_peak_handed = g_handed;
  pthread_mutex_unlock(&g_mu);
  if (verbose()) fprintf(stderr, "[fakecuda-alloc] cudaMalloc(%zu) -> %p\n", n, (void *)u);
  *p = (void *)u;
  return cudaSuccess;
}
static cudaError_t dev_free(void *p) {
  if (!p) return cudaSuccess;
  pthread_mutex_lock(&g_mu);
  for (size_t i = 0; i < g_nr; i++) if (g_r[i].user == (uintptr_t)p) {
    munmap((void *)g_r[i].base, g_r[i].len); g_handed -= g_r[i].req; g_nfree++;
    g_r[i] = g_r[--g_nr]; pthread_mutex_unlock(&g_mu);
    if (verbose()) fprintf(stderr, "[fakecuda-alloc] cudaFree(%p)\n", p);
    return cudaSuccess;
  }
  pthread_mutex_unlock(&g_mu);
  return cudaErrorInvalidValue;
}

/* counters read by the driver script through ctypes */
unsigned long long fakecuda_d2h_count(void) { return g_d2h; }
unsigned long long fakecuda_d2h_bytes(void) { return g_d2h_bytes; }
unsigned long long fakecuda_malloc_count(void) { return g_nmalloc; }
unsigned long long fakecuda_free_count(void) { return g_nfree; }
unsigned long long fakecuda_handed_bytes(void) { return g_handed; }
unsigned long long fakecuda_peak_handed_bytes(void) { return g_peak_handed; }
int fakecuda_is_alloc_mode(void) { return 1; }
int fakecuda_range_of(unsigned long long p, unsigned long long *base, unsigned long long *size) {
  pthread_mutex_lock(&g_mu); int i = find_range_locked((uintptr_t)p);
  if (i >= 0) { *base = g_r[i].user; *size = g_r[i].req; }
  pthread_mutex_unlock(&g_mu); return i >= 0;
}

cudaError_t cudaMalloc(void **p, size_t n) { return dev_alloc(p, n); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { return dev_alloc(p, n); }
cudaError_t cudaFree(void *p) { return dev_free(p); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return dev_free(p); }
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int f) { return cudaErrorNotSupported; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
  pthread_mutex_lock(&g_mu); unsigned long long used = g_handed + driver_bytes(); pthread_mutex_unlock(&g_mu);
  *f = used > TOTAL_MEM ? 0 : TOTAL_MEM - used; *t = TOTAL_MEM; return cudaSuccess;
}

/* pinned host memory: ordinary host memory */
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int f) { return posix_memalign(p, 4096, n ? n : 1) ? cudaErrorMemoryAllocation : cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaHostRegister(void *p, size_t n, unsigned int f) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void *p) { return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof(*a));
  if (is_device_ptr(p)) { a->type = cudaMemoryTypeDevice; a->device = 0; a->devicePointer = (void *)p; }
  else { a->type = cudaMemoryTypeUnregistered; a->device = -2; a->hostPointer = (void *)p; }
  return cudaSuccess;
}

/* ------------------------------------------------------------------ copies and memsets */
static cudaError_t do_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) {
  int dd = is_device_ptr(dst), sd = is_device_ptr(src);
  if (k == cudaMemcpyDefault) {
    if (dd) return cudaSuccess;                 /* H2D or D2D: nothing to do */
    k = sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  }
  switch (k) {
    case cudaMemcpyHostToHost: if (n) memmove(dst, src, n); return cudaSuccess;
    case cudaMemcpyDeviceToHost:
      if (dd) return cudaSuccess;
      memset(dst, 0, n);
      __atomic_add_fetch(&g_d2h, 1, __ATOMIC_SEQ_CST); __atomic_add_fetch(&g_d2h_bytes, n, __ATOMIC_SEQ_CST);
      if (verbose()) fprintf(stderr, "[fakecuda-alloc] D2H copy of %zu bytes (zeros)\n", n);
      return cudaSuccess;
    default: return cudaSuccess;                /* H2D, D2D: kernels never read device memory */
  }
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { return do_copy(d, s, n, k); }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { return do_copy(d, s, n, k); }
cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st) { return cudaSuccess; }
cudaError_t cudaMemcpyToSymbol(const void *sym, const void *src, size_t n, size_t off, enum cudaMemcpyKind k) { return cudaSuccess; }
cudaError_t cudaMemset(void *d, int v, size_t n) { return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t s) { return cudaSuccess; }
static char g_symbol_space[1 << 16];
cudaError_t cudaGetSymbolAddress(void **p, const void *sym) { *p = g_symbol_space; return cudaSuccess; }

/* ------------------------------------------------------------------ kernels */
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *f, void **a) { return cudaSuccess; }
/* <<<...>>> host stubs: push/pop the launch configuration (kept per thread, as cudart does). */
static __thread dim3 t_grid, t_block; static __thread size_t t_shmem; static __thread void *t_stream;
unsigned int __cudaPushCallConfiguration(dim3 g, dim3 b, size_t sh, void *st) { t_grid = g; t_block = b; t_shmem = sh; t_stream = st; return 0; }
cudaError_t __cudaPopCallConfiguration(dim3 *g, dim3 *b, size_t *sh, void *st) {
  if (g) *g = t_grid; if (b) *b = t_block; if (sh) *sh = t_shmem; if (st) *(void **)st = t_stream; return cudaSuccess;
}
cudaError_t __cudaGetKernel(void **k, const void *f) { if (k && !*k) *k = (void *)f; return cudaSuccess; }
cudaError_t __cudaLaunchKernel(void *k, ...) { return cudaSuccess; }
cudaError_t __cudaLaunchKernel_ptsz(void *k, ...) { return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f) {
  memset(a, 0, sizeof(*a));
  a->maxThreadsPerBlock = 1024; a->numRegs = 32; a->binaryVersion = 90; a->ptxVersion = 90;
  a->maxDynamicSharedSizeBytes = 49152; a->preferredShmemCarveout = -1;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute at, int v) { return cudaSuccess; }
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t k, enum cudaFuncAttribute at, int v, int d) { return cudaSuccess; }
static int occ(int bs) { int n = bs > 0 ? 2048 / bs : 1; if (n < 1) n = 1; if (n > 32) n = 32; return n; }
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *f, int bs, size_t sm) { *n = occ(bs); return cudaSuccess; }
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *f, int bs, size_t sm, unsigned int fl) { *n = occ(bs); return cudaSuccess; }

/* ------------------------------------------------------------------ device (as the harness shim) */
cudaError_t cudaGetDeviceCount(int *c) { note("cudaGetDeviceCount"); *c = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = g_dev; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { if (d != 0) return cudaErrorInvalidDevice; g_dev = d; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13020; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13020; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaDeviceCanAccessPeer(int *c, int d, int p) { *c = 0; return cudaSuccess; }
cudaError_t cudaDeviceEnablePeerAccess(int p, unsigned int f) { return cudaErrorInvalidDevice; }
cudaError_t cudaDeviceGetPCIBusId(char *s, int len, int d) { snprintf(s, len, "0000:01:00.0"); return cudaSuccess; }

static void fill_props(struct cudaDeviceProp *p) {
  memset(p, 0, sizeof(*p));
  strcpy(p->name, "FAKE NVIDIA H100 80GB HBM3 (fakecuda alloc shim)");
  p->totalGlobalMem = TOTAL_MEM;
  p->sharedMemPerBlock = 49152; p->regsPerBlock = 65536; p->warpSize = 32; p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536; p->major = 9; p->minor = 0; p->textureAlignment = 512;
  p->multiProcessorCount = 132; p->integrated = 0; p->canMapHostMemory = 1; p->concurrentKernels = 1;
  p->ECCEnabled = 1; p->pciBusID = 1; p->asyncEngineCount = 3; p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120; p->l2CacheSize = 52428800; p->persistingL2CacheMaxSize = 32505856;
  p->maxThreadsPerMultiProcessor = 2048; p->streamPrioritiesSupported = 1; p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1; p->sharedMemPerMultiprocessor = 233472; p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1; p->isMultiGpuBoard = 0; p->concurrentManagedAccess = 1;
  p->sharedMemPerBlockOptin = 232448; p->maxBlocksPerMultiProcessor = 32; p->accessPolicyMaxWindowSize = 134213632;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) { note("cudaGetDeviceProperties"); fill_props(p); return cudaSuccess; }
cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *p, int d) { fill_props(p); return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  switch (a) {
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 232448; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 49152; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 233472; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
    case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrL2CacheSize: *v = 52428800; break;
    case cudaDevAttrUnifiedAddressing: *v = 1; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *lo, int *hi) { if (lo) *lo = 0; if (hi) *hi = -5; return cudaSuccess; }

/* ------------------------------------------------------------------ streams / events (as the harness shim) */
static cudaStream_t new_handle(void) { return (cudaStream_t)calloc(1, 64); }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new_handle(); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) { *s = new_handle(); return cudaSuccess; }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int pr) { *s = new_handle(); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaStreamGetPriority(cudaStream_t s, int *p) { *p = 0; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f) { return cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) { *st = cudaStreamCaptureStatusNone; return cudaSuccess; }
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id,
    cudaGraph_t *g, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges, size_t *n) {
  if (st) *st = cudaStreamCaptureStatusNone; if (id) *id = 0; if (g) *g = NULL; if (deps) *deps = NULL; if (edges) *edges = NULL; if (n) *n = 0;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m) { return cudaSuccess; }
cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *u, unsigned int f) { cb(s, cudaSuccess, u); return cudaSuccess; }
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *u) { fn(u); return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (cudaEvent_t)calloc(1, 64); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f) { *e = (cudaEvent_t)calloc(1, 64); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int f) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = 0.f; return cudaSuccess; }
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

/* ------------------------------------------------------------------ driver entry points */
cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fp, unsigned int ver, unsigned long long fl,
                                             enum cudaDriverEntryPointQueryResult *st) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  void *f = h ? dlsym(h, sym) : NULL;
  if (verbose()) fprintf(stderr, "[fakecuda-alloc] cudaGetDriverEntryPointByVersion(%s) -> %p\n", sym, f);
  if (fp) *fp = f;
  if (st) *st = f ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return f ? cudaSuccess : cudaErrorSymbolNotFound;
}

