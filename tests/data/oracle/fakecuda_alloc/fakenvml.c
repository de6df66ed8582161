/* fakenvml.c -- stub "libnvidia-ml.so.1" (NVML) for the allocator mode of the fake device.
 * libc10_cuda.so dlopens NVML for expandable segments (get_fabric_access: may the segment's memory
 * use a FABRIC handle?) and for out-of-memory reports. Without a library it calls a null function
 * pointer, so this stub answers: nvmlInit_v2 and nvmlDeviceGetHandleByPciBusId_v2 succeed (a dummy
 * device), nvmlDeviceGetGpuFabricInfoV and the NvLink queries are NOT_SUPPORTED (no fabric, as on a
 * single PCIe/SXM GPU without NVSwitch fabric manager), nvmlSystemGetCudaDriverVersion_v2 says
 * 13.2, nvmlDeviceGetComputeRunningProcesses lists no process.
 */
typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
static int g_dev;
nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, void **dev) { *dev = &g_dev; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(void *dev, void *info) { return NVML_ERROR_NOT_SUPPORTED; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 13020; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned int *n, void *infos) { *n = 0; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void *dev, unsigned int link, int *t) { return NVML_ERROR_NOT_SUPPORTED; }
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *dev, unsigned int link, void *pci) { return NVML_ERROR_NOT_SUPPORTED; }
const char *nvmlErrorString(nvmlReturn_t r) { return r ? "fakenvml: not supported" : "Success"; }
