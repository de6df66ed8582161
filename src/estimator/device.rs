//! Device-level memory beside the allocated peak: what the caching allocator reserves, the cuBLAS
//! workspaces and the CUDA context.
//!
//! Segment model (`c10/cuda/CUDACachingAllocator.cpp`): requests ≤ 1 MiB come from 2 MiB
//! segments of the small pool (`kSmallBuffer`); requests of 1–10 MiB get 20 MiB segments
//! (`kLargeBuffer`); larger requests get their own segment rounded up to 2 MiB
//! (`kRoundLarge`). Reserved memory is cached, never returned during training, so it is the
//! largest segment footprint over the step. Workspaces: cuBLAS keeps one workspace per handle
//! (`CUBLAS_WORKSPACE_CONFIG` default `:4096:8` = 32 MiB on sm_90, `:4096:2:16:8` ≈ 8.1 MiB before)
//! plus cuBLASLt's (1 MiB default); forward and backward run on different threads, so two
//! handles. The CUDA context (driver state, loaded kernels) is not allocated through PyTorch:
//! about 0.3–1 GB depending on the GPU and the libraries loaded; 500 MiB unless the GPU preset
//! knows better.

use super::units::Bytes;

pub const SMALL_LIMIT: u64 = 1 << 20;
pub const SMALL_SEGMENT: u64 = 2 << 20;
pub const MEDIUM_LIMIT: u64 = 10 << 20;
pub const MEDIUM_SEGMENT: u64 = 20 << 20;
pub const LARGE_ROUND: u64 = 2 << 20;
pub const DEFAULT_CONTEXT: Bytes = Bytes(500 << 20);

/// Live bytes by allocator pool, to turn the allocated set into reserved segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pools {
    pub small: u64,
    pub medium: u64,
    pub large_rounded: u64,
}

impl Pools {
    pub fn add(&mut self, b: u64) {
        if b <= SMALL_LIMIT {
            self.small += b;
        } else if b <= MEDIUM_LIMIT {
            self.medium += b;
        } else {
            self.large_rounded += b.div_ceil(LARGE_ROUND) * LARGE_ROUND;
        }
    }
    pub fn sub(&mut self, b: u64) {
        if b <= SMALL_LIMIT {
            self.small = self.small.saturating_sub(b);
        } else if b <= MEDIUM_LIMIT {
            self.medium = self.medium.saturating_sub(b);
        } else {
            self.large_rounded = self
                .large_rounded
                .saturating_sub(b.div_ceil(LARGE_ROUND) * LARGE_ROUND);
        }
    }
    /// Segment bytes needed to hold these blocks (best case packing of each pool).
    pub fn reserved(&self) -> Bytes {
        Bytes(
            self.small.div_ceil(SMALL_SEGMENT) * SMALL_SEGMENT
                + self.medium.div_ceil(MEDIUM_SEGMENT) * MEDIUM_SEGMENT
                + self.large_rounded,
        )
    }
}

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
    fn pools_round_to_segments() {
        let mut p = Pools::default();
        p.add(512);
        p.add(3 << 20);
        p.add((30 << 20) + 1);
        assert_eq!(p.reserved(), Bytes((2 << 20) + (20 << 20) + (32 << 20)));
    }

    #[test]
    fn hopper_workspace_is_larger() {
        assert_eq!(cublas_workspace(90), Bytes(32 << 20));
        assert_eq!(cublas_workspace(80), Bytes(8_519_680));
    }
}
