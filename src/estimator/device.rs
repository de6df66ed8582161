//! Device-level memory beside the tensors: the cuBLAS workspace each matrix multiply takes from
//! the caching allocator, and the CUDA context (driver state, loaded kernels), which is not
//! allocated through PyTorch: about 0.3–1 GB depending on the GPU and the libraries loaded;
//! 500 MiB unless the GPU preset knows better. What the allocator reserves is its replay's
//! ([`super::allocator`]).

use super::units::{Bytes, DType};

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

/// The device properties PyTorch's reduction kernels size their grids by
/// (`cudaDeviceProp::multiProcessorCount`, `maxThreadsPerMultiProcessor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceDevice {
    pub sms: u32,
    pub threads_per_sm: u32,
}

impl ReduceDevice {
    /// A CUDA card of compute capability `sm` (× 10) with `sms` multiprocessors; none for
    /// non-NVIDIA devices (`sm` 0), whose kernels are not these.
    pub fn of(sm: u32, sms: u32) -> Option<ReduceDevice> {
        (sm > 0 && sms > 0).then(|| ReduceDevice {
            sms,
            threads_per_sm: max_threads_per_sm(sm),
        })
    }
}

/// Resident threads per multiprocessor by compute capability: the CUDA C++ Programming Guide's
/// "Technical Specifications per Compute Capability" table (2048 on 7.0, 8.0, 8.7, 9.0 and
/// 10.x; 1024 on 7.5; 1536 on 8.6, 8.9 and 12.x).
pub fn max_threads_per_sm(sm: u32) -> u32 {
    match sm {
        75 => 1024,
        86 | 89 | 120..=129 => 1536,
        _ => 2048,
    }
}

/// One reduction through PyTorch's generic CUDA reduction kernel (`gpu_reduce_kernel`), seen as
/// TensorIterator coalesces it: `outputs` results of `inputs` values each, over a contiguous
/// tensor of `dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reduction {
    pub outputs: u64,
    pub inputs: u64,
    /// The reduced values are the innermost (contiguous) ones, e.g. `x.sum(-1)`; otherwise
    /// the kept dimension is innermost, as for a bias gradient `grad.sum(0)` over `[rows, n]`.
    pub innermost: bool,
    pub dtype: DType,
}

/// The caching-allocator blocks a reduction allocates and frees inside its kernel: the staging
/// buffer (`global_memory_size()`) and the semaphores (`semaphore_size()`), allocated in that
/// order through `CUDACachingAllocator::get()->allocate` when `setReduceConfig` splits each
/// output across thread blocks; empty otherwise. Beyond 32-bit indexing
/// (`TensorIterator::with_32bit_indexing`) the kernel runs on halves of the iterator, one after
/// the other, split along the dimension of the largest stride, each with its own blocks.
///
/// `setReduceConfig` and `gpu_reduce_kernel` in `aten/src/ATen/native/cuda/Reduce.cuh`, and
/// `sum_functor` / `mean` in `ReduceSumProdKernel.cu` / `ReduceMomentKernel.cu` (PyTorch 2.15):
/// the accumulator (`arg_t`) is fp32 for fp32, fp16 and bf16 inputs, and 16-bit inputs load
/// 8 values per vector along the reduced dimension (`input_vec_size`), others 4 (`vt0`).
pub fn reduction_blocks(r: &Reduction, dev: ReduceDevice) -> Vec<u64> {
    let bytes = r
        .outputs
        .saturating_mul(r.inputs)
        .saturating_mul(r.dtype.bits() / 8);
    if bytes > i32::MAX as u64 && r.outputs.max(r.inputs) > 1 {
        // The outer dimension (largest stride) is the kept one when the reduced values are
        // innermost, else the reduced one.
        let half = |n: u64| n.div_ceil(2);
        let h = if r.innermost {
            Reduction {
                outputs: half(r.outputs),
                ..*r
            }
        } else {
            Reduction {
                inputs: half(r.inputs),
                ..*r
            }
        };
        return reduction_blocks(&h, dev);
    }
    let (staging, semaphores) = reduce_config(r, dev);
    if staging == 0 {
        Vec::new()
    } else {
        vec![staging, semaphores]
    }
}

/// `setReduceConfig` followed by `ReduceConfig::global_memory_size` and `semaphore_size` for a
/// contiguous, 4-value-aligned tensor (its data pointer and strides divisible by the vector).
fn reduce_config(r: &Reduction, dev: ReduceDevice) -> (u64, u64) {
    fn last_pow2(n: u64) -> u64 {
        if n == 0 {
            1
        } else {
            1 << (63 - n.leading_zeros())
        }
    }
    let (outputs, inputs) = (r.outputs.max(1), r.inputs.max(1));
    let elem = r.dtype.bits() / 8;
    let arg_t: u64 = if r.dtype.is_float() { 4 } else { 8 };
    let input_vec: u64 = if elem == 2 { 8 } else { 4 };
    // `get_output_vec_size`: the largest of 4, 2, 1 dividing the kept extent.
    let mut output_vec: u64 = 1;
    let (mut dim0, dim1) = if r.innermost {
        (inputs, outputs)
    } else {
        (outputs, inputs)
    };
    if r.innermost {
        if dim0 >= 128 {
            dim0 /= input_vec;
        }
    } else {
        output_vec = [4, 2, 1]
            .into_iter()
            .find(|v| outputs % v == 0)
            .unwrap_or(1);
        dim0 /= output_vec;
    }
    // `set_block_dimension` with `mnt_wrapper<T>::MAX_NUM_THREADS` = 512, the warp 32.
    let max_threads = 512 / output_vec;
    let pow2 = |d: u64| {
        if d < max_threads {
            last_pow2(d)
        } else {
            max_threads
        }
    };
    let (d0, d1) = (pow2(dim0), pow2(dim1));
    let mut block_width = d0.min(32);
    let block_height = d1.min(max_threads / block_width);
    block_width = d0.min(max_threads / block_height);
    let num_threads = block_width * block_height;
    let (mut step_input, mut step_output) = (1u64, 1u64);
    if r.innermost {
        step_input *= block_width;
    } else {
        step_output *= block_width;
    }
    let values_per_thread = |step: u64| inputs.div_ceil(step);
    let split_across_warps = values_per_thread(step_input) >= (block_height * 16).min(256);
    if split_across_warps {
        step_input *= block_height;
    } else {
        step_output *= block_height;
    }
    let grid_x = (outputs / output_vec).div_ceil(step_output);
    let target_grid = u64::from(dev.sms) * (u64::from(dev.threads_per_sm) / num_threads);
    let vpt = values_per_thread(step_input);
    if !(split_across_warps && vpt >= 256 && grid_x <= target_grid) {
        return (0, 0);
    }
    let ctas = target_grid
        .div_ceil(grid_x.max(1))
        .min(vpt.div_ceil(16))
        .max(vpt.div_ceil(256));
    if ctas <= 1 {
        return (0, 0);
    }
    let mut staging = arg_t * outputs * ctas;
    if !r.innermost {
        // Without a reduction across the block's x lanes, each lane keeps its own slot.
        staging *= block_width * output_vec;
    }
    (staging, 4 * grid_x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: ReduceDevice = ReduceDevice {
        sms: 132,
        threads_per_sm: 2048,
    };

    fn blocks(outputs: u64, inputs: u64, innermost: bool, dtype: DType) -> Vec<u64> {
        let r = Reduction {
            outputs,
            inputs,
            innermost,
            dtype,
        };
        reduction_blocks(&r, H100)
    }

    /// Bytes PyTorch 2.15's real caching allocator handed out inside `x.sum(0)` on the faked
    /// H100 (requested peak minus the tensors), for bias gradients of ViT-B/16 at batch 16
    /// (3152 rows) and 32 (6304), and a column count whose vector is 2.
    #[test]
    fn bias_gradient_sums_match_the_real_allocator() {
        assert_eq!(blocks(3072, 3152, false, DType::BF16), vec![78_643_200, 96]);
        assert_eq!(
            blocks(3072, 6304, false, DType::BF16),
            vec![138_412_032, 96]
        );
        assert_eq!(blocks(768, 3152, false, DType::F32), vec![19_660_800, 24]);
        assert_eq!(
            blocks(2304, 6304, false, DType::BF16),
            vec![116_785_152, 72]
        );
        assert_eq!(
            blocks(1000, 25_088, false, DType::BF16),
            vec![135_168_000, 32]
        );
        assert_eq!(blocks(10, 25_088, false, DType::BF16), vec![8_000, 8]);
        // Too few rows to split, or too many outputs.
        assert!(blocks(3072, 256, false, DType::BF16).is_empty());
        assert!(blocks(50_257, 3152, false, DType::BF16).is_empty());
        // Along the contiguous dimension each output has its own blocks already.
        assert!(blocks(3152, 3072, true, DType::BF16).is_empty());
    }

    #[test]
    fn hopper_workspace_is_larger() {
        assert_eq!(cublas_workspace(90), Bytes(32 << 20));
        assert_eq!(cublas_workspace(80), Bytes(8_519_680));
    }
}
