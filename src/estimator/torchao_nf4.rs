//! torchao 0.1's `NF4Tensor` (`torchao/dtypes/nf4tensor.py` at tag v0.1, the version torchtune
//! 0.1 pins with `torchao==0.1`) as device allocations: what one quantized weight keeps, and the
//! blocks `to_nf4` and `get_original_weight` allocate and free, in the order PyTorch's caching
//! allocator sees them. Unlike bitsandbytes, every step of the quantization is an eager PyTorch
//! op on the whole weight, so its temporaries are large: `quantize_tensor_nearest` compares each
//! element with the 16 NF4 levels in one broadcast (`(value - nf4).abs()`, two `[n, 16]` bf16
//! tensors, 64 bytes per weight element) and keeps the `argmin` as int64.

use super::allocator::{AllocTrace, Handle};
use super::device::{reduction_blocks, ReduceDevice, Reduction};
use super::units::DType;

/// Weights per absmax block (`to_nf4(..., block_size=64)`).
pub const BLOCK: u64 = 64;
/// Absmax values per second-level block (`scaler_block_size=256`).
pub const SCALER_BLOCK: u64 = 256;

/// The storages one `NF4Tensor` of `n` elements keeps, in the order `from_tensor` allocates
/// them: the 16-entry bf16 NF4 table, the bf16 `scaler_mean`, the bf16 `quantization_factor`
/// (a `[:, 0]` view that keeps the whole `[n/64/256, 256]` product it was sliced from: `n/64`
/// elements), the int8 `quantized_scalers` (`n/64`) and the packed data (two elements a byte).
pub fn storages(n: u64) -> [(u64, DType); 5] {
    let nb = n / BLOCK;
    [
        (16, DType::BF16),
        (1, DType::BF16),
        (nb, DType::BF16),
        (nb, DType::I8),
        (n, DType::I4),
    ]
}

/// The handles of what one quantized weight keeps, in [`storages`] order.
#[derive(Clone, Copy, Debug)]
pub struct Kept(pub [Handle; 5]);

impl Kept {
    /// Frees the pieces in the order an `NF4Tensor`'s attributes are replaced or dropped
    /// (`__init__` order: `quantized_scalers`, `quantization_factor`, `scaler_mean`,
    /// `quantized_data`, `nf4`).
    pub fn free(self, t: &mut AllocTrace) {
        let [table, mean, factor, scalers, data] = self.0;
        for h in [scalers, factor, mean, data, table] {
            t.free(h);
        }
    }
}

/// The staging blocks of a reduction (`Reduce.cuh`), allocated and freed inside its kernel.
fn staged(t: &mut AllocTrace, dev: Option<ReduceDevice>, r: Reduction) {
    let Some(dev) = dev else { return };
    let hs: Vec<Handle> = reduction_blocks(&r, dev)
        .into_iter()
        .map(|b| t.alloc(b))
        .collect();
    for h in hs.into_iter().rev() {
        t.free(h);
    }
}

/// `get_block_absmax(x, block)` over `m` bf16 elements: `x.view(-1, block).abs().max(dim=1)`;
/// returns the kept `values` (the temporary `abs` and the int64 `indices` are freed).
fn block_absmax(t: &mut AllocTrace, m: u64, block: u64) -> Handle {
    let rows = m / block;
    let abs = t.alloc(2 * m);
    let values = t.alloc(2 * rows);
    let indices = t.alloc(8 * rows);
    t.free(abs);
    t.free(indices);
    values
}

/// `to_nf4(w)` of a bf16 weight of `n` elements already on the device (`NF4Tensor.from_tensor`:
/// `double_quantize_scalers`, then `convert_to_norm_float_weight`). The caller still owns `w`.
pub fn quantize(t: &mut AllocTrace, n: u64, dev: Option<ReduceDevice>) -> Kept {
    let nb = n / BLOCK;
    let table = t.alloc(32);
    // double_quantize_scalers: absmax per block, minus their mean ...
    let s1 = block_absmax(t, n, BLOCK);
    let mean = t.alloc(2);
    staged(
        t,
        dev,
        Reduction {
            outputs: 1,
            inputs: nb,
            innermost: true,
            dtype: DType::BF16,
        },
    );
    let centred = t.alloc(2 * nb);
    t.free(s1);
    // ... their absmax per 256, and `256 / (2 * absmax)` over the expanded `[nsb, 256]` view
    // (`Tensor.__rtruediv__` is `reciprocal() * 256`).
    let absmax2 = block_absmax(t, nb, SCALER_BLOCK);
    let doubled = t.alloc(2 * nb);
    let reciprocal = t.alloc(2 * nb);
    let factor = t.alloc(2 * nb);
    t.free(reciprocal);
    t.free(doubled);
    // `(blocks * factor).round().clamp(-128, 127)`, then `.to(torch.int8)`.
    let scaled = t.alloc(2 * nb);
    let rounded = t.alloc(2 * nb);
    t.free(scaled);
    let clamped = t.alloc(2 * nb);
    t.free(rounded);
    let scalers = t.alloc(nb);
    t.free(clamped);
    t.free(absmax2);
    t.free(centred);
    // convert_to_norm_float_weight: the blocks scaled by their absmax ...
    let absmax = block_absmax(t, n, BLOCK);
    let blocks = t.alloc(2 * n);
    // ... quantize_tensor_nearest: `(value - nf4).abs()` as `[n, 16]` bf16, then its `min`.
    let diff = t.alloc(32 * n);
    let abs = t.alloc(32 * n);
    t.free(diff);
    let min_values = t.alloc(2 * n);
    let nearest = t.alloc(8 * n);
    t.free(min_values);
    t.free(abs);
    // `quantized_blocks[::2] << 4 | quantized_blocks[1::2]` in int64, then `.to(torch.uint8)`.
    let shifted = t.alloc(4 * n);
    let combined = t.alloc(4 * n);
    t.free(shifted);
    let data = t.alloc(n.div_ceil(2));
    t.free(absmax);
    t.free(blocks);
    t.free(nearest);
    t.free(combined);
    Kept([table, mean, factor, scalers, data])
}

/// `Tensor.__deepcopy__` of a wrapper subclass (`torch/_tensor.py`): after `self.clone()` it
/// deep-copies the instance `__dict__` onto the clone, so each piece of `cloned` is copied again
/// (a storage deepcopy, with a one-element temporary of its dtype) in attribute order, and the
/// clone's own pieces are then dropped. Returns the copies.
pub fn deepcopy_pieces(t: &mut AllocTrace, n: u64, cloned: Kept) -> Kept {
    let st = storages(n);
    let mut copies = [Handle::NONE; 5];
    // `__dict__` order: quantized_scalers, quantization_factor, scaler_mean, quantized_data, nf4.
    for i in [3, 2, 1, 4, 0] {
        let (e, d) = st[i];
        copies[i] = t.alloc((e * d.bits()).div_ceil(8));
        let one = t.alloc(d.bits().div_ceil(8));
        t.free(one);
    }
    cloned.free(t);
    Kept(copies)
}

/// `get_original_weight()` (what `weight.to(dtype)` dispatches to, in `linear_nf4`'s forward
/// and backward and in torchtune's `clone`): the nibbles unpacked to int64, looked up in the
/// table, scaled by the dequantized absmax and interleaved by `torch.stack`. Returns the bf16
/// weight (`2n` bytes); everything else is freed when the function returns.
pub fn dequantize(t: &mut AllocTrace, n: u64) -> Handle {
    let nb = n / BLOCK;
    let half = n / 2;
    let unpack = |t: &mut AllocTrace| {
        let nibbles = t.alloc(half);
        let long = t.alloc(8 * half);
        t.free(nibbles);
        long
    };
    let first = unpack(t);
    let second = unpack(t);
    let dq1 = t.alloc(2 * half);
    let dq2 = t.alloc(2 * half);
    let divided = t.alloc(2 * nb);
    let scalers = t.alloc(2 * nb);
    t.free(divided);
    let scale = |t: &mut AllocTrace| {
        let repeated = t.alloc(2 * half);
        let s = t.alloc(2 * half);
        t.free(repeated);
        s
    };
    let sf = scale(t);
    let ss = scale(t);
    let out = t.alloc(2 * n);
    for h in [first, second, dq1, dq2, scalers, sf, ss] {
        t.free(h);
    }
    out
}

/// The most bytes [`dequantize`] holds at once beyond its output's `2n` (just before it
/// returns: the int64 nibbles, the looked-up and scaled halves, the absmax values), for a
/// graph op's scratch.
pub fn dequantize_peak(n: u64) -> u64 {
    let nb = n / BLOCK;
    let half = n / 2;
    2 * (8 * half) + 4 * (2 * half) + 2 * nb + 2 * n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::allocator::{replay, AllocatorSettings};

    /// torchao 0.1 on the allocator-mode fake device (`tests/data/oracle/torchtune_init.py`
    /// records the stream): quantizing one `[4096, 4096]` weight holds the weight (32 MiB), the
    /// scaled blocks (32 MiB) and the two `[n, 16]` bf16 comparisons (512 MiB each) at once.
    #[test]
    fn quantizing_holds_sixty_eight_bytes_per_element() {
        let n = 4096 * 4096;
        let mut t = AllocTrace::default();
        let w = t.alloc(2 * n);
        let kept = quantize(&mut t, n, None);
        t.free(w);
        let r = replay(&t, &[], AllocatorSettings::default(), None);
        // The table and the mean take a 512-byte block each; the factor, scalers and scaled
        // blocks' absmax (5 bytes per block of 64) are live beside them.
        assert_eq!(r.max_allocated.0, 68 * n + 5 * (n / BLOCK) + 512 * 2);
        let _ = kept;
    }

    #[test]
    fn dequantizing_peaks_at_fourteen_bytes_per_element() {
        let n = 4096 * 4096;
        assert_eq!(dequantize_peak(n), 14 * n + 2 * n / BLOCK);
        let mut t = AllocTrace::default();
        dequantize(&mut t, n);
        let r = replay(&t, &[], AllocatorSettings::default(), None);
        assert_eq!(r.max_allocated.0, dequantize_peak(n));
    }
}
