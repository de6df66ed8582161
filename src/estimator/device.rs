//! Device-level memory beside the tensors: the cuBLAS workspace each matrix multiply takes from
//! the caching allocator, and the CUDA context (driver state, loaded kernels), which is not
//! allocated through PyTorch: about 0.3–1 GB depending on the GPU and the libraries loaded;
//! 500 MiB unless the GPU preset knows better. What the allocator reserves is its replay's
//! ([`super::allocator`]).

use super::units::Bytes;

pub const DEFAULT_CONTEXT: Bytes = Bytes(500 << 20);

/// The cuBLAS workspace of one matrix multiply: PyTorch's `getChosenWorkspaceSize`
/// (`aten/src/ATen/cuda/CublasHandlePool.cpp`, PyTorch 2.15): 32 MiB from sm_90 on, else
/// `CUBLAS_WORKSPACE_CONFIG`'s default `:4096:2:16:8` (2 × 4 MiB + 8 × 16 KiB). PyTorch 2.15
/// allocates it through the caching allocator for each GEMM and frees it after (a 32 MiB block
/// inside every `aten.mm`, measured in `tests/data/reserved/`; `TORCH_CUBLAS_WORKSPACE_CACHE=1`
/// would keep one per handle), and cuBLASLt shares it.
pub fn cublas_workspace(sm: u32) -> Bytes {
    Bytes(if sm >= 90 {
        32 << 20
    } else {
        (4096 << 10) * 2 + (16 << 10) * 8
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_workspace_is_larger() {
        assert_eq!(cublas_workspace(90), Bytes(32 << 20));
        assert_eq!(cublas_workspace(80), Bytes(8_519_680));
    }
}
