//! GPUs as data: usable memory, bandwidth, compute capability, multiprocessor count and dense bf16/fp16 tensor
//! throughput from the vendors' data sheets.
//!
//! Memory is the device's total as PyTorch sees it: `torch.cuda.get_device_properties(i).total_memory`,
//! the "total capacity" of its out-of-memory message. The driver keeps part of the board for
//! itself (and ECC, where on, more), so a "24 GB" RTX 4090 gives PyTorch 23.64 GiB, not 24 or
//! 22.35. Each value is the one Linux users report in PyTorch's OOM messages with 2023–2026
//! drivers, cited per row (`github.com/<repo>/issues/<n>`); it moves by 0.1–0.2 GiB between
//! driver versions (a T4 shows 14.74 GiB on older ones), and Windows reports the nominal size.
//! Apple's unified memory is the Metal `recommendedMaxWorkingSetSize` of macOS 14–15 (75 % of
//! the RAM; macOS 26 allows more on 128 GB machines).

use crate::estimator::device::DEFAULT_CONTEXT;
pub use crate::estimator::hardware::Gpu;
use crate::estimator::hardware::{DEFAULT_SM, DEFAULT_SMS};
use crate::estimator::units::Bytes;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[allow(clippy::too_many_arguments)]
const fn gpu(
    id: &'static str,
    name: &'static str,
    mib: u64,
    bw: f64,
    sm: u32,
    sms: u32,
    tf: f64,
    tf32: f64,
    ctx_mib: u64,
) -> Gpu {
    Gpu {
        id,
        name,
        memory: Bytes(mib * MIB),
        bandwidth_gbs: bw,
        sm,
        sms,
        tflops_bf16: tf,
        tflops_fp32: tf32,
        context: Bytes(ctx_mib * MIB),
    }
}

pub const GPUS: &[Gpu] = &[
    // 15.78 GiB: Shift-GCN/issues/34 ("16G V100").
    gpu(
        "v100-16",
        "V100 16 GB",
        16_160,
        900.0,
        70,
        80,
        125.0,
        15.7,
        400,
    ),
    // 31.74 GiB: liucongg/ChatGLM-Finetuning/issues/73 ("V100 32GB").
    gpu(
        "v100-32",
        "V100 32 GB",
        32_502,
        900.0,
        70,
        80,
        125.0,
        15.7,
        400,
    ),
    // 14.56–14.58 GiB with current drivers: Zheng-Chong/CatVTON/issues/133 (GCP Tesla T4),
    // QwenLM/Qwen3-VL/issues/1046; 14.74–14.76 with older ones (15 360 MiB in nvidia-smi).
    gpu("t4", "T4 16 GB", 14_920, 320.0, 75, 40, 65.0, 8.1, 400),
    // 21.98–22.06 GiB reported for the A10G (23 028 MiB in nvidia-smi), the A10's cloud twin.
    gpu("a10", "A10 24 GB", 22_528, 600.0, 86, 72, 125.0, 31.2, 450),
    // 22.03 GiB ("L4 24GB ... visible to PyTorch"); 23 034 MiB in nvidia-smi.
    gpu("l4", "L4 24 GB", 22_559, 300.0, 89, 58, 121.0, 30.3, 450),
    // 39.39 GiB (GCP A100 40GB reports); 40 960 MiB in nvidia-smi.
    gpu(
        "a100-40",
        "A100 40 GB",
        40_335,
        1555.0,
        80,
        108,
        312.0,
        19.5,
        450,
    ),
    // 79.25 GiB: HiDream-ai/VAREdit/issues/6, levihsu/OOTDiffusion/issues/235 (79.14 on some SXM boards).
    gpu(
        "a100-80",
        "A100 80 GB",
        81_152,
        2039.0,
        80,
        108,
        312.0,
        19.5,
        450,
    ),
    // 79.18 GiB with 550+ drivers (79.11 with 535: vllm-project/vllm/issues/27508, 81 559 MiB in nvidia-smi).
    gpu(
        "h100-80",
        "H100 80 GB",
        81_080,
        3350.0,
        90,
        132,
        989.0,
        67.0,
        520,
    ),
    // 139.80 GiB (single and 8× H200 reports).
    gpu(
        "h200-141",
        "H200 141 GB",
        143_155,
        4800.0,
        90,
        132,
        989.0,
        67.0,
        520,
    ),
    // No report found: the H100 HBM3's share (79.18 of 80 GiB) of its 96 GiB, 95.0 GiB.
    gpu(
        "gh200-96",
        "GH200 96 GB (HBM3)",
        97_300,
        4000.0,
        90,
        132,
        989.0,
        67.0,
        520,
    ),
    // 178.35 GiB (B200 nodes, Modal B200).
    gpu(
        "b200-192",
        "B200 192 GB",
        182_630,
        8000.0,
        100,
        148,
        2250.0,
        75.0,
        600,
    ),
    // 23.70 GiB: Lightning-AI/lit-llama/issues/137, GaoLii/DSP/issues/10.
    gpu(
        "rtx3090",
        "RTX 3090 24 GB",
        24_269,
        936.0,
        86,
        82,
        71.0,
        35.6,
        400,
    ),
    // 23.64 GiB: ali-vilab/VGen/issues/104, TMElyralab/MuseTalk/issues/76; 24 564 MiB in nvidia-smi.
    gpu(
        "rtx4090",
        "RTX 4090 24 GB",
        24_207,
        1008.0,
        89,
        128,
        165.0,
        82.6,
        400,
    ),
    // 31.37 GiB: Wan-Video/Wan2.1/issues/465.
    gpu(
        "rtx5090",
        "RTX 5090 32 GB",
        32_123,
        1792.0,
        120,
        170,
        210.0,
        104.8,
        450,
    ),
    // 44.43 GiB with ECC on (46 068 MiB in nvidia-smi): DINGYANB/MTVCrafter/issues/21. With ECC
    // off the card gives about 3 GiB more; the smaller figure errs on the side of "does not fit".
    gpu(
        "rtx6000ada",
        "RTX 6000 Ada 48 GB",
        45_496,
        960.0,
        89,
        142,
        364.0,
        91.1,
        450,
    ),
    // 191.98 GiB under ROCm (191.69 on some builds).
    gpu(
        "mi300x",
        "MI300X 192 GB",
        196_588,
        5300.0,
        0,
        0,
        1307.0,
        163.4,
        600,
    ),
    // 96 GiB working set: Comfy-Org/ComfyUI/issues/9308 ("max allowed" 163.20 GB = 1.7 × 96).
    gpu(
        "m3-max-128",
        "Apple M3 Max 128 GB unified",
        96 * 1024,
        400.0,
        0,
        0,
        28.0,
        14.2,
        0,
    ),
    gpu(
        "m2-ultra-192",
        "Apple M2 Ultra 192 GB unified",
        144 * 1024,
        800.0,
        0,
        0,
        54.0,
        27.2,
        0,
    ),
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
    // A card of unknown kind is the card the estimate assumes when none is named (its compute
    // capability and context: `DeviceOverhead`), so naming only a capacity changes only the
    // capacity. fp32 at 1/16 of the tensor-core rate: the A100's ratio (19.5 of 312 TFLOPS,
    // NVIDIA A100 data sheet).
    Some(Gpu {
        id: "custom",
        name: "Custom",
        memory: Bytes((gib * GIB as f64) as u64),
        bandwidth_gbs: 1000.0,
        sm: DEFAULT_SM,
        sms: DEFAULT_SMS,
        tflops_bf16: 300.0,
        tflops_fp32: 300.0 / 16.0,
        context: DEFAULT_CONTEXT,
    })
}

#[cfg(test)]
mod tests {
    use super::find;

    /// The capacities PyTorch reports (cited in `GPUS`), within 0.05 GiB: the verdict compares
    /// the device total with these, so a marketing size would call fitting what runs out.
    #[test]
    fn capacities_are_what_pytorch_reports() {
        for (id, gib) in [
            ("t4", 14.57),
            ("rtx4090", 23.64),
            ("rtx3090", 23.70),
            ("a100-40", 39.39),
            ("a100-80", 79.25),
            ("h100-80", 79.18),
            ("h200-141", 139.80),
            ("b200-192", 178.35),
            ("mi300x", 191.98),
        ] {
            let got = find(id).unwrap().memory.gib();
            assert!(
                (got - gib).abs() < 0.05,
                "{id}: {got:.3} GiB, reported {gib}"
            );
        }
        // No NVIDIA board gives PyTorch its nominal size in GiB.
        for g in super::GPUS.iter().filter(|g| g.sm > 0) {
            let words: Vec<&str> = g.name.split_whitespace().collect();
            let nominal: f64 = words
                .windows(2)
                .find(|w| w[1] == "GB")
                .and_then(|w| w[0].parse().ok())
                .unwrap();
            assert!(
                g.memory.gib() < nominal,
                "{}: {:.2} GiB of a {nominal} GB board",
                g.id,
                g.memory.gib()
            );
        }
    }

    /// A custom card differs from no card only in its capacity: the same workspaces and context.
    #[test]
    fn a_custom_card_has_the_default_overhead() {
        use crate::estimator::hardware::DeviceOverhead;
        let custom = super::find("custom:24").unwrap();
        assert_eq!(
            DeviceOverhead::of(Some(&custom), &Default::default()),
            DeviceOverhead::of(None, &Default::default())
        );
    }

    #[test]
    fn custom_capacity_parses_and_rejects_nonsense() {
        assert_eq!(super::find("custom:24").unwrap().memory.gib(), 24.0);
        assert!(super::find("custom:-1").is_none());
        assert!(super::find("custom:NaN").is_none());
        assert!(super::find("nope").is_none());
    }
}
