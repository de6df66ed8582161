/* fakecublaslt.c -- LD_PRELOAD stand-in for the libcublasLt.so.13 calls libtorch_cuda.so imports,
 * for the allocator mode of the fake device.
 *  - cublasLtGetVersion: the version of the shipped headers (13.4.1);
 *  - descriptor / layout / preference Create return fresh dummy objects; Set*Attribute succeed;
 *  - cublasLtMatmulAlgoGetHeuristic returns ONE algorithm, state SUCCESS, workspaceSize 0
 *    (PyTorch passes its own workspace, allocated through the caching allocator, as on a GPU;
 *    the algorithm's own need is not known without the real heuristics);
 *  - cublasLtMatmulAlgoCheck answers SUCCESS with workspaceSize 0; AlgoConfigGetAttribute zeros;
 *  - cublasLtMatmul succeeds without computing anything.
 */
#include <stdlib.h>
#include <string.h>
typedef int cublasStatus_t;
typedef struct { unsigned long long data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; } cublasLtMatmulHeuristicResult_t;
size_t cublasLtGetVersion(void) { return 130401; }
cublasStatus_t cublasLtMatmulDescCreate(void **d, int compute, int scale) { *d = calloc(1, 256); return 0; }
cublasStatus_t cublasLtMatrixLayoutCreate(void **d, int type, unsigned long long r, unsigned long long c, long long ld) { *d = calloc(1, 256); return 0; }
cublasStatus_t cublasLtMatmulPreferenceCreate(void **d) { *d = calloc(1, 256); return 0; }
cublasStatus_t cublasLtMatmulDescDestroy(void *d) { free(d); return 0; }
cublasStatus_t cublasLtMatrixLayoutDestroy(void *d) { free(d); return 0; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(void *d) { free(d); return 0; }
cublasStatus_t cublasLtMatmulDescSetAttribute() { return 0; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute() { return 0; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute() { return 0; }
cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute() { return 0; }
cublasStatus_t cublasLtMatmulAlgoInit(void *h, int ct, int st, int a, int b, int c, int d, int id, cublasLtMatmulAlgo_t *algo) { memset(algo, 0, sizeof(*algo)); return 0; }
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo, int attr, void *buf, size_t n, size_t *written) {
  if (buf && n) memset(buf, 0, n); if (written) *written = n; return 0;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(void *h, void *op, void *A, void *B, void *C, void *D, void *pref, int req,
                                              cublasLtMatmulHeuristicResult_t *res, int *ret) {
  if (req > 0 && res) { memset(&res[0], 0, sizeof(res[0])); res[0].state = 0; res[0].wavesCount = 1.0f; *ret = 1; }
  else *ret = 0;
  return 0;
}
cublasStatus_t cublasLtMatmulAlgoCheck(void *h, void *op, void *A, void *B, void *C, void *D, const cublasLtMatmulAlgo_t *algo,
                                       cublasLtMatmulHeuristicResult_t *res) {
  memset(res, 0, sizeof(*res)); res->algo = *algo; res->wavesCount = 1.0f; return 0;
}
cublasStatus_t cublasLtMatmul() { return 0; }
