/* fakecudnn.c -- LD_PRELOAD stand-in for the libcudnn.so.9 calls PyTorch imports (libtorch_cuda.so
 * and cudnnGetProperty from libtorch_python.so), for the allocator mode of the fake device. It
 * keeps cuDNN *enabled*, so PyTorch selects the same ops as on a GPU (cudnn_batch_norm,
 * cudnn_convolution, cuDNN SDPA) and allocates their outputs and saved tensors through the real
 * caching allocator, but nothing is computed.
 *  - version queries: cuDNN 9.26.0 (the shipped wheel's headers), cudart 13.2;
 *  - cudnnCreate / cudnnCreate*Descriptor: fresh dummy objects; Set* succeed; the tensor and filter
 *    descriptors remember what was set so that Get*NdDescriptor answers it;
 *  - legacy algorithm queries (cudnnGetConvolution*Algorithm_v7, cudnnFind*AlgorithmEx) return one
 *    algorithm with status SUCCESS and memory 0;
 *  - EVERY workspace / reserve-space size query answers 0 bytes (BN forward/backward workspace,
 *    BN reserve space, conv workspaces, dropout states, RNN, CTC). The real sizes depend on the
 *    algorithm cuDNN would pick on a real GPU; they are kernel scratch the fake-device harness
 *    does not count either. So reserved/allocated figures here EXCLUDE cuDNN workspaces.
 *  - backend (graph) API, used by cudnn_frontend inside PyTorch for convolutions (v8 API) and cuDNN
 *    attention: descriptors are dummies, Set/Finalize/Execute succeed; GetAttribute answers
 *    ENGINEHEUR_RESULTS with one engine config, OPERATIONGRAPH_ENGINE_GLOBAL_COUNT with 1,
 *    any single-element query with a zero value (so every execution plan's WORKSPACE_SIZE is 0,
 *    engine index 0) and any array query (notes, knobs, JSON) with 0 elements.
 *  - compute calls (convolution, batch norm, pooling, RNN, CTC, spatial transformer) succeed.
 */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef int cudnnStatus_t;
size_t cudnnGetVersion(void) { return 92600; }
size_t cudnnGetCudartVersion(void) { return 13020; }
cudnnStatus_t cudnnGetProperty(int type, int *v) { *v = type == 0 ? 9 : type == 1 ? 26 : 0; return 0; }
const char *cudnnGetErrorString(cudnnStatus_t s) { return s ? "fakecudnn: error" : "CUDNN_STATUS_SUCCESS"; }
void cudnnGetLastErrorString(char *m, size_t n) { if (m && n) m[0] = 0; }

typedef struct { void *stream; } Handle;
cudnnStatus_t cudnnCreate(void **h) { *h = calloc(1, sizeof(Handle)); return 0; }
cudnnStatus_t cudnnSetStream(void *h, void *s) { ((Handle *)h)->stream = s; return 0; }
cudnnStatus_t cudnnGetStream(void *h, void **s) { *s = ((Handle *)h)->stream; return 0; }

typedef struct { int dtype, fmt, nb, dims[16], strides[16]; } Desc;
#define CREATE(n) cudnnStatus_t n(void **d) { *d = calloc(1, sizeof(Desc)); return 0; }
#define DESTROY(n) cudnnStatus_t n(void *d) { free(d); return 0; }
CREATE(cudnnCreateActivationDescriptor) CREATE(cudnnCreateCTCLossDescriptor) CREATE(cudnnCreateConvolutionDescriptor)
CREATE(cudnnCreateDropoutDescriptor) CREATE(cudnnCreateFilterDescriptor) CREATE(cudnnCreatePoolingDescriptor)
CREATE(cudnnCreateRNNDataDescriptor) CREATE(cudnnCreateRNNDescriptor) CREATE(cudnnCreateSpatialTransformerDescriptor)
CREATE(cudnnCreateTensorDescriptor)
DESTROY(cudnnDestroyActivationDescriptor) DESTROY(cudnnDestroyCTCLossDescriptor) DESTROY(cudnnDestroyConvolutionDescriptor)
DESTROY(cudnnDestroyDropoutDescriptor) DESTROY(cudnnDestroyFilterDescriptor) DESTROY(cudnnDestroyRNNDataDescriptor)
DESTROY(cudnnDestroyRNNDescriptor) DESTROY(cudnnDestroySpatialTransformerDescriptor) DESTROY(cudnnDestroyTensorDescriptor)

cudnnStatus_t cudnnSetTensorNdDescriptor(Desc *d, int dt, int nb, const int *dims, const int *strides) {
  d->dtype = dt; d->nb = nb > 16 ? 16 : nb;
  for (int i = 0; i < d->nb; i++) { d->dims[i] = dims[i]; d->strides[i] = strides[i]; }
  return 0;
}
cudnnStatus_t cudnnGetTensorNdDescriptor(const Desc *d, int req, int *dt, int *nb, int *dims, int *strides) {
  *dt = d->dtype; *nb = d->nb;
  for (int i = 0; i < d->nb && i < req; i++) { dims[i] = d->dims[i]; strides[i] = d->strides[i]; }
  return 0;
}
cudnnStatus_t cudnnSetFilterNdDescriptor(Desc *d, int dt, int fmt, int nb, const int *dims) {
  d->dtype = dt; d->fmt = fmt; d->nb = nb > 16 ? 16 : nb;
  for (int i = 0; i < d->nb; i++) d->dims[i] = dims[i];
  return 0;
}
cudnnStatus_t cudnnGetFilterNdDescriptor(const Desc *d, int req, int *dt, int *fmt, int *nb, int *dims) {
  *dt = d->dtype; *fmt = d->fmt; *nb = d->nb;
  for (int i = 0; i < d->nb && i < req; i++) dims[i] = d->dims[i];
  return 0;
}

/* ---- every workspace / reserve size: 0 bytes */
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(void *h, int m, int o, void *x, void *z, void *y, void *b, void *a, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(void *h, int m, int o, void *a, void *x, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(void *h, int m, int o, void *x, void *y, void *dy, void *dz, void *dx, void *db, void *a, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(void *h, void *x, void *w, void *c, void *y, int al, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(void *h, void *w, void *dy, void *c, void *dx, int al, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(void *h, void *x, void *dy, void *c, void *dw, int al, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnDropoutGetStatesSize(void *h, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetRNNWeightSpaceSize(void *h, void *r, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetRNNTempSpaceSizes(void *h, void *r, int m, void *x, size_t *w, size_t *rs) { if (w) *w = 0; if (rs) *rs = 0; return 0; }
cudnnStatus_t cudnnGetRNNWeightParams(void *h, void *r, int32_t l, size_t ws, const void *w, int32_t id, void *md, void **ma, void *bd, void **ba) { if (ma) *ma = NULL; if (ba) *ba = NULL; return 0; }
cudnnStatus_t cudnnGetCTCLossWorkspaceSize(void *h, void *p, void *g, const int *l, const int *ll, const int *il, int al, void *c, size_t *s) { *s = 0; return 0; }
cudnnStatus_t cudnnGetCTCLossWorkspaceSize_v8(void *h, int al, void *c, void *p, void *g, size_t *s) { *s = 0; return 0; }

/* ---- legacy algorithm choice: one algorithm, no workspace */
typedef struct { int algo; int status; float time; size_t memory; int determinism; int mathType; int reserved[3]; } Perf;
static void one(int *ret, Perf *p, int req) { if (req > 0 && p) { memset(p, 0, sizeof(*p)); p->algo = 1; p->determinism = 1; *ret = 1; } else *ret = 0; }
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(void *h, void *a, void *b, void *c, void *d, int req, int *ret, Perf *p) { one(ret, p, req); return 0; }
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(void *h, void *a, void *b, void *c, void *d, int req, int *ret, Perf *p) { one(ret, p, req); return 0; }
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(void *h, void *a, void *b, void *c, void *d, int req, int *ret, Perf *p) { one(ret, p, req); return 0; }
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(void *h, void *a, void *x, void *b, void *w, void *c, void *d, void *y, int req, int *ret, Perf *p, void *ws, size_t n) { one(ret, p, req); return 0; }
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(void *h, void *a, void *x, void *b, void *w, void *c, void *d, void *y, int req, int *ret, Perf *p, void *ws, size_t n) { one(ret, p, req); return 0; }
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(void *h, void *a, void *x, void *b, void *w, void *c, void *d, void *y, int req, int *ret, Perf *p, void *ws, size_t n) { one(ret, p, req); return 0; }

/* ---- backend (graph) API */
typedef struct { int type; } BDesc;
cudnnStatus_t cudnnBackendCreateDescriptor(int type, void **d) { BDesc *b = calloc(1, 64); b->type = type; *d = b; return 0; }
cudnnStatus_t cudnnBackendDestroyDescriptor(void *d) { free(d); return 0; }
cudnnStatus_t cudnnBackendFinalize(void *d) { return 0; }
cudnnStatus_t cudnnBackendSetAttribute(void *d, int name, int type, int64_t n, const void *arr) { return 0; }
cudnnStatus_t cudnnBackendExecute(void *h, void *plan, void *pack) { return 0; }
static size_t elem_size(int type) {
  switch (type) {
    case 0: case 3: case 5: case 6: return 8;       /* handle, int64, double, void* */
    case 2: case 24: return 1;                       /* bool, char */
    case 26: return 16;                              /* cudnnFraction_t */
    default: return 4;                               /* float, int32, enums */
  }
}
cudnnStatus_t cudnnBackendGetAttribute(void *d, int name, int type, int64_t req, int64_t *count, void *arr) {
  if (name == 202 /* ENGINEHEUR_RESULTS */) { if (count) *count = req == 0 ? 1 : (req < 1 ? req : 1); return 0; }
  if (name == 802 /* OPERATIONGRAPH_ENGINE_GLOBAL_COUNT */) { if (arr && req >= 1) *(int64_t *)arr = 1; if (count) *count = 1; return 0; }
  if (type == 15 /* BACKEND_DESCRIPTOR: caller-created descriptors, leave them */) { if (count) *count = req == 1 ? 1 : 0; return 0; }
  if (req == 1) { if (arr) memset(arr, 0, elem_size(type)); if (count) *count = 1; return 0; }
  if (count) *count = 0;
  return 0;
}

/* ---- compute and setters: succeed, do nothing */
#define OK(n) cudnnStatus_t n() { return 0; }
OK(cudnnBatchNormalizationBackwardEx) OK(cudnnBatchNormalizationForwardInference) OK(cudnnBatchNormalizationForwardTrainingEx)
OK(cudnnCTCLoss) OK(cudnnCTCLoss_v8) OK(cudnnConvolutionBackwardData) OK(cudnnConvolutionBackwardFilter)
OK(cudnnConvolutionBiasActivationForward) OK(cudnnConvolutionForward) OK(cudnnPoolingForward)
OK(cudnnRNNBackwardData_v8) OK(cudnnRNNBackwardWeights_v8) OK(cudnnRNNForward) OK(cudnnRestoreDropoutDescriptor)
OK(cudnnSetActivationDescriptor) OK(cudnnSetCTCLossDescriptorEx) OK(cudnnSetCTCLossDescriptor_v9) OK(cudnnSetConvolutionGroupCount)
OK(cudnnSetConvolutionMathType) OK(cudnnSetConvolutionNdDescriptor) OK(cudnnSetDropoutDescriptor) OK(cudnnSetPooling2dDescriptor)
OK(cudnnSetRNNDataDescriptor) OK(cudnnSetRNNDescriptor_v8) OK(cudnnSetSpatialTransformerNdDescriptor)
OK(cudnnSpatialTfGridGeneratorBackward) OK(cudnnSpatialTfGridGeneratorForward) OK(cudnnSpatialTfSamplerBackward) OK(cudnnSpatialTfSamplerForward)
