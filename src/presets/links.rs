//! Interconnects as data: the links between GPUs of a node, between nodes, and between a GPU and
//! its host memory, each with its bandwidth in ONE direction.
//!
//! Vendors quote NVLink and PCIe as the sum of both directions ("600 GB/s" for the A100's NVLink
//! is 300 GB/s out plus 300 GB/s in at the same time); network ports are quoted per direction
//! ("400 Gb/s" NDR sends 400 Gb/s and receives 400 Gb/s). A collective is limited by what one GPU
//! can send while it receives, so every figure here is per direction, in GB/s (10⁹ B/s), and the
//! nccl-tests "bus bandwidth" it is compared with is unidirectional too
//! (NVIDIA/nccl-tests `doc/PERFORMANCE.md`).

use crate::estimator::hardware::Gpu;
pub use crate::estimator::hardware::{Link, LinkKind};

const fn link(
    id: &'static str,
    name: &'static str,
    kind: LinkKind,
    gbs: f64,
    lat: f64,
    source: &'static str,
) -> Link {
    Link {
        id,
        name,
        kind,
        gbs_per_direction: gbs,
        latency_us: lat,
        shared_memory: false,
        source,
    }
}

use LinkKind::*;

/// Gigabits per second of a network port to gigabytes per second.
const fn gbit(g: f64) -> f64 {
    g / 8.0
}

/// PCIe x16 payload bandwidth per direction: GT/s × 16 lanes × 128/130 encoding / 8 bits.
const fn pcie_x16(gts: f64) -> f64 {
    gts * 16.0 * 128.0 / 130.0 / 8.0
}

pub const LINKS: &[Link] = &[
    link("nvlink2", "NVLink 2 (V100 SXM2)", IntraNode, 150.0, 5.0, "V100 data sheet: NVLink 300 GB/s total = 6 links × 25 GB/s per direction"),
    link("nvlink3", "NVLink 3 (A100 SXM)", IntraNode, 300.0, 5.0, "A100 data sheet: NVLink 600 GB/s total = 12 links × 25 GB/s per direction"),
    link("nvlink4", "NVLink 4 (H100/H200 SXM)", IntraNode, 450.0, 5.0, "H100 SXM data sheet: NVLink 900 GB/s total = 18 links × 25 GB/s per direction"),
    link("nvlink5", "NVLink 5 (B200)", IntraNode, 900.0, 5.0, "HGX B200 data sheet: NVLink 1.8 TB/s total per GPU = 18 links × 50 GB/s per direction"),
    link("xgmi-mi300x", "Infinity Fabric (MI300X)", IntraNode, 448.0, 5.0, "MI300X data sheet: 896 GB/s aggregate peer bandwidth = 7 links × 64 GB/s per direction"),
    link("pcie3", "PCIe 3.0 x16", IntraNode, pcie_x16(8.0), 10.0, "PCIe 3.0: 8 GT/s per lane, 128b/130b (15.8 GB/s each way)"),
    link("pcie4", "PCIe 4.0 x16", IntraNode, pcie_x16(16.0), 10.0, "PCIe 4.0: 16 GT/s per lane, 128b/130b (31.5 GB/s each way, the '64 GB/s' of data sheets is both ways)"),
    link("pcie5", "PCIe 5.0 x16", IntraNode, pcie_x16(32.0), 10.0, "PCIe 5.0: 32 GT/s per lane, 128b/130b (63 GB/s each way, the '128 GB/s' of data sheets is both ways)"),
    link("ib-hdr", "InfiniBand HDR 200 Gb/s", InterNode, gbit(200.0), 5.0, "InfiniBand HDR: 200 Gb/s per port per direction (ConnectX-6)"),
    link("ib-ndr", "InfiniBand NDR 400 Gb/s", InterNode, gbit(400.0), 5.0, "InfiniBand NDR: 400 Gb/s per port per direction (ConnectX-7)"),
    link("ib-xdr", "InfiniBand XDR 800 Gb/s", InterNode, gbit(800.0), 5.0, "InfiniBand XDR: 800 Gb/s per port per direction (ConnectX-8)"),
    link("eth-25g", "25 GbE (RoCE)", InterNode, gbit(25.0), 10.0, "25 Gb/s Ethernet per direction"),
    link("eth-100g", "100 GbE (RoCE)", InterNode, gbit(100.0), 10.0, "100 Gb/s Ethernet per direction"),
    link("eth-200g", "200 GbE (RoCE)", InterNode, gbit(200.0), 10.0, "200 Gb/s Ethernet per direction"),
    link("eth-400g", "400 GbE (RoCE)", InterNode, gbit(400.0), 10.0, "400 Gb/s Ethernet per direction"),
    link("nvlink-c2c", "NVLink-C2C (GH200 Grace ↔ Hopper)", Host, 450.0, 2.0, "GH200 data sheet: NVLink-C2C 900 GB/s bidirectional = 450 GB/s per direction"),
    Link { id: "unified", name: "Unified memory (Apple silicon)", kind: Host, gbs_per_direction: 0.0, latency_us: 1.0, shared_memory: true, source: "one LPDDR pool: a copy reads and writes it, so half the SoC memory bandwidth" },
    link("host-pcie4", "Host over PCIe 4.0 x16", Host, pcie_x16(16.0), 10.0, "PCIe 4.0 x16 to the CPU: 31.5 GB/s each way"),
    link("host-pcie5", "Host over PCIe 5.0 x16", Host, pcie_x16(32.0), 10.0, "PCIe 5.0 x16 to the CPU: 63 GB/s each way"),
];

/// A link by id. `pcie4`/`pcie5` are accepted for the host link as well.
pub fn find(id: &str) -> Option<Link> {
    LINKS.iter().find(|l| l.id == id).copied()
}

fn by_id(id: &str) -> Link {
    // Every id below is in the table (checked by a test).
    find(id).unwrap_or(LINKS[0])
}

/// The usual GPU-to-GPU link inside a node for a GPU preset: NVLink of its generation on SXM
/// parts, PCIe for cards without NVLink.
pub fn default_intra(gpu: Option<&Gpu>) -> Link {
    let id = gpu.map(|g| g.id).unwrap_or("h100-80");
    by_id(match id {
        "v100-16" | "v100-32" => "nvlink2",
        "a100-40" | "a100-80" => "nvlink3",
        "h100-80" | "h200-141" | "gh200-96" => "nvlink4",
        "b200-192" => "nvlink5",
        "mi300x" => "xgmi-mi300x",
        "rtx5090" => "pcie5",
        _ => "pcie4",
    })
}

/// The usual network port per GPU for a GPU preset's generation.
pub fn default_inter(gpu: Option<&Gpu>) -> Link {
    let id = gpu.map(|g| g.id).unwrap_or("h100-80");
    by_id(match id {
        "a100-40" | "a100-80" => "ib-hdr",
        "h100-80" | "h200-141" | "gh200-96" | "mi300x" => "ib-ndr",
        "b200-192" => "ib-xdr",
        _ => "eth-100g",
    })
}

/// The usual link to host memory: PCIe of the card's generation, NVLink-C2C on Grace Hopper,
/// the shared pool on Apple silicon.
pub fn default_host(gpu: Option<&Gpu>) -> Link {
    let id = gpu.map(|g| g.id).unwrap_or("h100-80");
    let l = by_id(match id {
        "gh200-96" => "nvlink-c2c",
        "m3-max-128" | "m2-ultra-192" => "unified",
        "h100-80" | "h200-141" | "b200-192" | "rtx5090" | "mi300x" => "host-pcie5",
        _ => "host-pcie4",
    });
    l.for_gpu(gpu)
}

/// A host link by id; a plain `pcie4`/`pcie5` means the host link of that generation.
pub fn find_host(id: &str, gpu: Option<&Gpu>) -> Option<Link> {
    let id = match id {
        "pcie4" => "host-pcie4",
        "pcie5" => "host-pcie5",
        other => other,
    };
    find(id).map(|l| l.for_gpu(gpu))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::gpus;

    #[test]
    fn defaults_resolve_to_table_entries() {
        for g in gpus::GPUS {
            for l in [
                default_intra(Some(g)),
                default_inter(Some(g)),
                default_host(Some(g)),
            ] {
                assert!(l.gbs_per_direction > 0.0, "{} {}", g.id, l.id);
                assert!(find(l.id).is_some());
            }
        }
    }

    #[test]
    fn per_direction_figures() {
        assert_eq!(find("nvlink3").unwrap().gbs_per_direction, 300.0);
        assert!((find("pcie4").unwrap().gbs_per_direction - 31.5).abs() < 0.1);
        assert!((find("pcie5").unwrap().gbs_per_direction - 63.0).abs() < 0.1);
        assert_eq!(find("ib-ndr").unwrap().gbs_per_direction, 50.0);
        assert_eq!(find("nvlink-c2c").unwrap().gbs_per_direction, 450.0);
        let m3 = gpus::find("m3-max-128").unwrap();
        assert_eq!(default_host(Some(&m3)).gbs_per_direction, 200.0);
    }
}
