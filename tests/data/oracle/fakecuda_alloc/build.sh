#!/bin/bash
# Builds the allocator-mode fake-CUDA shims into $1 (default ${XDG_CACHE_HOME:-$HOME/.cache}/vram-reference/fakecuda_alloc).
# Needs gcc and the CUDA 13 runtime headers shipped in the torch wheel's deps (nvidia/cu13/include)
# plus crt/host_defines.h (shipped by triton), as the shared harness's fakecuda/build.sh.
# Outputs: libfakecudart.so (LD_PRELOAD, binds to libcudart.so.13), libfakecublas.so,
# libfakecublaslt.so, libfakecudnn.so (LD_PRELOAD, bind to libcublas.so.13, libcublasLt.so.13,
# libcudnn.so.9 through their version scripts) and libcuda.so.1 (driver stub, found through
# LD_LIBRARY_PATH), libnvidia-ml.so.1 (NVML stub, dlopened by libc10_cuda.so for expandable segments).
set -e
OUT=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/vram-reference/fakecuda_alloc}
PY=${PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/vram-reference/venv/bin/python}
SP=$($PY -c 'import site; print(site.getsitepackages()[0])')
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
CF="-shared -fPIC -O2 -Wall -Wno-unused-function -Wno-strict-prototypes -Wno-misleading-indentation"
gcc $CF -I"$SP/nvidia/cu13/include" -I"$SP/triton/backends/nvidia/include" \
    -Wl,--version-script="$HERE/fakecudart.map" -o "$OUT/libfakecudart.so" "$HERE/fakecudart.c" "$HERE/fakecudart_refused.c" -ldl -lpthread
gcc $CF -Wl,--version-script="$HERE/fakecublas.map" -o "$OUT/libfakecublas.so" "$HERE/fakecublas.c"
gcc $CF -Wl,--version-script="$HERE/fakecublaslt.map" -o "$OUT/libfakecublaslt.so" "$HERE/fakecublaslt.c"
gcc $CF -Wl,--version-script="$HERE/fakecudnn.map" -o "$OUT/libfakecudnn.so" "$HERE/fakecudnn.c"
gcc $CF -Wl,-soname,libcuda.so.1 -o "$OUT/libcuda.so.1" "$HERE/fakelibcuda.c" -lpthread
gcc $CF -Wl,-soname,libnvidia-ml.so.1 -o "$OUT/libnvidia-ml.so.1" "$HERE/fakenvml.c"
echo "built $OUT/{libfakecudart,libfakecublas,libfakecublaslt,libfakecudnn}.so, $OUT/libcuda.so.1 and $OUT/libnvidia-ml.so.1"
