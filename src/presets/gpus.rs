//! GPUs as data: usable memory, bandwidth, compute capability and dense bf16/fp16 tensor
//! throughput from the vendors' data sheets. Memory is what `cudaMemGetInfo` reports as total
//! (the marketing "80 GB" of an H100 is 80 GiB of HBM3 = 85.0e9 B; "16 GB" GDDR cards are 16 GiB).

use crate::estimator::units::Bytes;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    pub id: &'static str,
    pub name: &'static str,
    pub memory: Bytes,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// CUDA compute capability × 10 (0 for non-NVIDIA).
    pub sm: u32,
    /// Dense bf16/fp16 tensor TFLOPS.
    pub tflops_bf16: f64,
    /// Dense fp32 (non-tensor-core) TFLOPS from the data sheet: PyTorch runs fp32 matmuls in full
    /// fp32 by default (`torch.backends.cuda.matmul.allow_tf32 = False`).
    pub tflops_fp32: f64,
    /// CUDA context and loaded kernels (measured with `nvidia-smi` minus PyTorch's reserved, typical).
    pub context: Bytes,
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[allow(clippy::too_many_arguments)]
const fn gpu(id: &'static str, name: &'static str, gib: u64, bw: f64, sm: u32, tf: f64, tf32: f64, ctx_mib: u64) -> Gpu {
    Gpu { id, name, memory: Bytes(gib * GIB), bandwidth_gbs: bw, sm, tflops_bf16: tf, tflops_fp32: tf32, context: Bytes(ctx_mib * MIB) }
}

pub const GPUS: &[Gpu] = &[
    gpu("v100-16", "V100 16 GB", 16, 900.0, 70, 125.0, 15.7, 400),
    gpu("v100-32", "V100 32 GB", 32, 900.0, 70, 125.0, 15.7, 400),
    gpu("t4", "T4 16 GB", 15, 320.0, 75, 65.0, 8.1, 400),
    gpu("a10", "A10 24 GB", 24, 600.0, 86, 125.0, 31.2, 450),
    gpu("l4", "L4 24 GB", 24, 300.0, 89, 121.0, 30.3, 450),
    gpu("a100-40", "A100 40 GB", 40, 1555.0, 80, 312.0, 19.5, 450),
    gpu("a100-80", "A100 80 GB", 80, 2039.0, 80, 312.0, 19.5, 450),
    gpu("h100-80", "H100 80 GB", 80, 3350.0, 90, 989.0, 67.0, 520),
    gpu("h200-141", "H200 141 GB", 141, 4800.0, 90, 989.0, 67.0, 520),
    gpu("gh200-96", "GH200 96 GB (HBM3)", 96, 4000.0, 90, 989.0, 67.0, 520),
    gpu("b200-192", "B200 192 GB", 180, 8000.0, 100, 2250.0, 75.0, 600),
    gpu("rtx3090", "RTX 3090 24 GB", 24, 936.0, 86, 71.0, 35.6, 400),
    gpu("rtx4090", "RTX 4090 24 GB", 24, 1008.0, 89, 165.0, 82.6, 400),
    gpu("rtx5090", "RTX 5090 32 GB", 32, 1792.0, 120, 210.0, 104.8, 450),
    gpu("rtx6000ada", "RTX 6000 Ada 48 GB", 48, 960.0, 89, 364.0, 91.1, 450),
    gpu("mi300x", "MI300X 192 GB", 192, 5300.0, 0, 1307.0, 163.4, 600),
    gpu("m3-max-128", "Apple M3 Max 128 GB unified", 96, 400.0, 0, 28.0, 14.2, 0),
    gpu("m2-ultra-192", "Apple M2 Ultra 192 GB unified", 144, 800.0, 0, 54.0, 27.2, 0),
];

/// A GPU by id, or a custom capacity written as `custom:24` (GiB).
pub fn find(id: &str) -> Option<Gpu> {
    if let Some(g) = GPUS.iter().find(|g| g.id == id) {
        return Some(*g);
    }
    let gib = crate::estimator::units::parse_decimal(id.strip_prefix("custom:")?)?;
    if !(gib.is_finite() && gib > 0.0 && gib <= 1_048_576.0) {
        return None;
    }
    // fp32 at 1/16 of the tensor-core rate: the A100's ratio (19.5 of 312 TFLOPS, NVIDIA A100 data sheet).
    Some(Gpu { id: "custom", name: "Custom", memory: Bytes((gib * GIB as f64) as u64), bandwidth_gbs: 1000.0, sm: 80, tflops_bf16: 300.0, tflops_fp32: 300.0 / 16.0, context: Bytes(500 * MIB) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn custom_capacity_parses_and_rejects_nonsense() {
        assert_eq!(super::find("custom:24").unwrap().memory.gib(), 24.0);
        assert!(super::find("custom:-1").is_none());
        assert!(super::find("custom:NaN").is_none());
        assert!(super::find("nope").is_none());
    }
}
