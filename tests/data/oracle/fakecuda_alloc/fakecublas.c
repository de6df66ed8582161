/* fakecublas.c -- LD_PRELOAD stand-in for the libcublas.so.13 calls libtorch_cuda.so imports
 * (list: nm -D --undefined-only torch/lib/libtorch_cuda.so | grep @libcublas.so.13), for the
 * allocator mode of the fake device. No GEMM runs (device data is garbage anyway).
 *  - cublasCreate_v2 returns a fresh dummy handle; cublasGetMathMode / GetPointerMode answer the
 *    defaults (CUBLAS_DEFAULT_MATH, CUBLAS_POINTER_MODE_HOST);
 *  - cublasSetStream/SetWorkspace/SetMathMode/SetPointerMode/SetSmCountTarget succeed. The
 *    workspace PyTorch hands to cublasSetWorkspace is allocated by PyTorch through its caching
 *    allocator with the size it picks for the (faked) sm_90 device, exactly as on a GPU;
 *  - every compute call (gemm, gemv, dot, batched solvers) returns CUBLAS_STATUS_SUCCESS and
 *    writes nothing (dot products into host memory would only give garbage; unused in training).
 */
#include <stdlib.h>
typedef int cublasStatus_t;
cublasStatus_t cublasCreate_v2(void **h) { *h = calloc(1, 64); return 0; }
cublasStatus_t cublasDestroy_v2(void *h) { return 0; }
cublasStatus_t cublasGetMathMode(void *h, int *m) { *m = 0; return 0; }
cublasStatus_t cublasGetPointerMode_v2(void *h, int *m) { *m = 0; return 0; }
#define OK(name) cublasStatus_t name() { return 0; }
OK(cublasSetMathMode) OK(cublasSetPointerMode_v2) OK(cublasSetSmCountTarget) OK(cublasSetStream_v2) OK(cublasSetWorkspace_v2)
OK(cublasCdotc_v2) OK(cublasCdotu_v2) OK(cublasCgelsBatched) OK(cublasCgemmStridedBatched) OK(cublasCgemm_v2) OK(cublasCgemv_v2)
OK(cublasCgeqrfBatched) OK(cublasCgetrfBatched) OK(cublasCgetrsBatched) OK(cublasCtrsmBatched) OK(cublasCtrsm_v2) OK(cublasDdot_v2)
OK(cublasDgelsBatched) OK(cublasDgemmStridedBatched) OK(cublasDgemm_v2) OK(cublasDgemv_v2) OK(cublasDgeqrfBatched)
OK(cublasDgetrfBatched) OK(cublasDgetrsBatched) OK(cublasDotEx) OK(cublasDtrsmBatched) OK(cublasDtrsm_v2) OK(cublasGemmEx)
OK(cublasGemmStridedBatchedEx) OK(cublasSdot_v2) OK(cublasSgelsBatched) OK(cublasSgemmEx) OK(cublasSgemv_v2) OK(cublasSgeqrfBatched)
OK(cublasSgetrfBatched) OK(cublasSgetrsBatched) OK(cublasStrsmBatched) OK(cublasStrsm_v2) OK(cublasZdotc_v2) OK(cublasZdotu_v2)
OK(cublasZgelsBatched) OK(cublasZgemmStridedBatched) OK(cublasZgemm_v2) OK(cublasZgemv_v2) OK(cublasZgeqrfBatched)
OK(cublasZgetrfBatched) OK(cublasZgetrsBatched) OK(cublasZtrsmBatched) OK(cublasZtrsm_v2)
OK(cublasSgemm_v2) OK(cublasHgemm) OK(cublasSgemmStridedBatched) OK(cublasDgemmBatched) OK(cublasSgemmBatched)
