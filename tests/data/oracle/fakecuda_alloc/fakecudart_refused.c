/* fakecudart_refused.c -- part of libfakecudart.so (see fakecudart.c): the libcudart.so.13 calls
 * PyTorch imports that the measured training steps never need and that cannot be faked sensibly:
 * IPC handles, CUDA graphs and stream capture, stream-ordered memory pools (cudaMallocAsync
 * backend), user objects, runtime loading of kernels (cudaLibrary*, jiterator). Each returns
 * cudaErrorNotSupported (801) and says so on stderr with FAKECUDA_VERBOSE=1. Compiled without the
 * CUDA headers, so the argument lists do not matter (the caller's arguments are ignored).
 */
#include <stdio.h>
#include <stdlib.h>
static void note(const char *f) { if (getenv("FAKECUDA_VERBOSE")) fprintf(stderr, "[fakecuda-alloc] REFUSED %s\n", f); }
#define REFUSE(name) int name() { note(#name); return 801; }
REFUSE(cudaIpcGetMemHandle) REFUSE(cudaIpcOpenMemHandle) REFUSE(cudaIpcCloseMemHandle)
REFUSE(cudaIpcGetEventHandle) REFUSE(cudaIpcOpenEventHandle)
REFUSE(cudaGraphInstantiate) REFUSE(cudaGraphInstantiateWithFlags) REFUSE(cudaGraphLaunch)
REFUSE(cudaGraphAddNode) REFUSE(cudaGraphConditionalHandleCreate) REFUSE(cudaGraphDestroy) REFUSE(cudaGraphExecDestroy)
REFUSE(cudaGraphGetNodes) REFUSE(cudaGraphRetainUserObject) REFUSE(cudaGraphNodeGetDependencies)
REFUSE(cudaStreamBeginCapture) REFUSE(cudaStreamBeginCaptureToGraph) REFUSE(cudaStreamEndCapture)
REFUSE(cudaStreamUpdateCaptureDependencies) REFUSE(cudaUserObjectCreate) REFUSE(cudaUserObjectRelease)
REFUSE(cudaDeviceGetDefaultMemPool) REFUSE(cudaMemPoolSetAttribute) REFUSE(cudaMemPoolGetAttribute)
REFUSE(cudaMemPoolTrimTo) REFUSE(cudaMemPoolSetAccess) REFUSE(cudaDeviceGetGraphMemAttribute) REFUSE(cudaDeviceSetGraphMemAttribute)
REFUSE(cudaLibraryLoadData) REFUSE(cudaLibraryLoadFromFile) REFUSE(cudaLibraryUnload) REFUSE(cudaLibraryGetKernel)
REFUSE(cudaLibraryGetKernelCount) REFUSE(cudaLibraryGetGlobal) REFUSE(cudaLibraryGetManaged) REFUSE(cudaLibraryGetUnifiedFunction)
