//! Communication volume and time, and the compute time it is set against.
//!
//! Volumes are those of NCCL's ring algorithms (Patarasuk & Yuan 2009; the factors nccl-tests
//! uses to turn algorithm bandwidth into bus bandwidth, `doc/PERFORMANCE.md`): for a buffer of S
//! bytes over N ranks each GPU sends (and receives) `2(N−1)/N · S` in an all-reduce and
//! `(N−1)/N · S` in a reduce-scatter or all-gather (S being the full, unsharded buffer); a
//! point-to-point send moves S; an all-to-all (pairwise exchange, NCCL's `alltoall` as grouped
//! sends and receives) sends `(N−1)/N · S` of a rank's S-byte buffer in `N − 1` steps. Time follows the α–β model: `steps · α + bytes / (B · η)`, with B
//! the per-direction bandwidth of the slowest link the ring crosses and η = [`BUS_EFFICIENCY`].
//!
//! Ranks are laid out as Megatron-LM orders them (`tp` fastest, then `dp`, then `pp`,
//! `megatron/core/parallel_state.py` "tp-cp-ep-dp-pp"), so a group of `n` ranks `stride` apart
//! stays inside a node when `stride · n ≤ gpus_per_node`. A group that spans nodes is limited by
//! the network: its members on one node share that node's ports in proportion to their number
//! (rail-optimised clusters have one port per GPU, `nics_per_node = gpus_per_node`).

use serde::Serialize;

use crate::estimator::graph::Precision;
use crate::estimator::hardware::{Gpu, Link};

pub use super::tp::Collective;

/// Fraction of the per-direction link bandwidth NCCL sustains on large messages. nccl-tests
/// `sendrecv_perf` on 8 × A100 SXM reaches 195 GB/s of NVLink 3's 300 GB/s (0.65; li-plus/playground
/// `cuda/nccl.md`); large all-reduces reach higher bus bandwidth. An assumption between the two.
pub const BUS_EFFICIENCY: f64 = 0.7;

/// Model FLOPs utilisation assumed for the compute time of a step: PaLM 540B trained at 46.2 %
/// MFU (Chowdhery et al. 2022, Table 3); Megatron-LM reached 52 % of A100 peak on a 1T-parameter
/// GPT (Narayanan et al. 2021, §5.1: 163 of 312 TFLOPS). Override with `parallel.mfu`.
pub const DEFAULT_MFU: f64 = 0.45;

/// Peak FLOP/s of `gpu` for a step in `precision` (bf16/fp16 tensor cores unless fp32).
pub fn peak_flops(gpu: &Gpu, precision: Precision) -> f64 {
    let tf = match precision {
        Precision::Fp32 => gpu.tflops_fp32,
        _ => gpu.tflops_bf16,
    };
    tf * 1e12
}

/// Bytes one rank sends (and receives) in a ring collective over `n` ranks of a `bytes` buffer.
pub fn ring_bytes(c: Collective, n: u64, bytes: u64) -> f64 {
    let n = n.max(1) as f64;
    let s = bytes as f64;
    match c {
        Collective::AllReduce => 2.0 * (n - 1.0) / n * s,
        Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n * s,
        Collective::SendRecv => s,
        Collective::AllToAll => (n - 1.0) / n * s,
    }
}

/// Latency-bound steps of the ring algorithm.
pub fn ring_steps(c: Collective, n: u64) -> f64 {
    let n = n.max(1) as f64;
    match c {
        Collective::AllReduce => 2.0 * (n - 1.0),
        Collective::AllGather | Collective::ReduceScatter => n - 1.0,
        Collective::SendRecv => 1.0,
        Collective::AllToAll => n - 1.0,
    }
}

/// The effective link a group communicates over.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GroupLink {
    pub link: &'static str,
    /// Bytes per second per direction before [`BUS_EFFICIENCY`].
    pub bytes_per_s: f64,
    pub latency_s: f64,
    pub crosses_nodes: bool,
}

/// The cluster shape the links are chosen from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Topology {
    pub gpus_per_node: u64,
    pub nics_per_node: u64,
    pub intra: Link,
    pub inter: Link,
}

impl Topology {
    /// The link of a group of `n` ranks `stride` apart.
    pub fn group(&self, stride: u64, n: u64) -> GroupLink {
        let gpn = self.gpus_per_node.max(1);
        let stride = stride.max(1);
        if n <= 1 || stride.saturating_mul(n) <= gpn {
            return GroupLink {
                link: self.intra.id,
                bytes_per_s: self.intra.bytes_per_s(),
                latency_s: self.intra.latency_us * 1e-6,
                crosses_nodes: false,
            };
        }
        let local = if stride >= gpn {
            1
        } else {
            (gpn / stride).clamp(1, n)
        };
        let net = self.inter.bytes_per_s() * self.nics_per_node as f64 * local as f64 / gpn as f64;
        let intra = if local > 1 {
            self.intra.bytes_per_s()
        } else {
            f64::INFINITY
        };
        let (bw, id) = if net <= intra {
            (net, self.inter.id)
        } else {
            (intra, self.intra.id)
        };
        GroupLink {
            link: id,
            bytes_per_s: bw,
            latency_s: self.inter.latency_us.max(self.intra.latency_us) * 1e-6,
            crosses_nodes: true,
        }
    }
    /// The link between neighbours of a pipeline of `n` stages `stride` ranks apart; the slowest
    /// boundary sets the pace, so one crossing between nodes makes it the network's.
    pub fn pair(&self, stride: u64, n: u64) -> GroupLink {
        let gpn = self.gpus_per_node.max(1);
        if stride.max(1).saturating_mul(n) <= gpn {
            return GroupLink {
                link: self.intra.id,
                bytes_per_s: self.intra.bytes_per_s(),
                latency_s: self.intra.latency_us * 1e-6,
                crosses_nodes: false,
            };
        }
        let net = self.inter.bytes_per_s() * self.nics_per_node as f64 / gpn as f64;
        GroupLink {
            link: self.inter.id,
            bytes_per_s: net,
            latency_s: self.inter.latency_us * 1e-6,
            crosses_nodes: true,
        }
    }
}

/// Seconds of one collective.
pub fn collective_seconds(c: Collective, n: u64, bytes: u64, l: &GroupLink) -> f64 {
    if n <= 1 && c != Collective::SendRecv || bytes == 0 {
        return 0.0;
    }
    ring_steps(c, n) * l.latency_s + ring_bytes(c, n, bytes) / (l.bytes_per_s * BUS_EFFICIENCY)
}

/// Seconds to copy `bytes` over a host link one way (a DMA copy, at the link's rate times
/// [`BUS_EFFICIENCY`]).
pub fn copy_seconds(bytes: u64, l: &Link) -> f64 {
    if bytes == 0 || l.gbs_per_direction <= 0.0 {
        return 0.0;
    }
    l.latency_us * 1e-6 + bytes as f64 / (l.bytes_per_s() * BUS_EFFICIENCY)
}

/// What a transfer belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Traffic {
    /// DDP's gradient all-reduce.
    Dp,
    /// ZeRO's collectives.
    Zero,
    /// FSDP's collectives.
    Fsdp,
    /// Tensor parallelism's collectives.
    Tp,
    /// Pipeline sends between stages.
    Pp,
    /// Expert parallelism's token all-to-alls.
    Ep,
    /// Copies to and from host memory.
    Offload,
}

impl std::fmt::Display for Traffic {
    /// The key the JSON output carries (`dp`, `zero`, `fsdp`, `tp`, `pp`, `ep`, `offload`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Traffic::Dp => "dp",
            Traffic::Zero => "zero",
            Traffic::Fsdp => "fsdp",
            Traffic::Tp => "tp",
            Traffic::Pp => "pp",
            Traffic::Ep => "ep",
            Traffic::Offload => "offload",
        })
    }
}

/// One kind of traffic of a step, per GPU.
#[derive(Clone, Debug, Serialize)]
pub struct CommItem {
    pub scheme: Traffic,
    pub what: String,
    pub collective: Option<Collective>,
    /// Ranks in the group (1 for host copies).
    pub group: u64,
    /// The full buffer of one call, bytes.
    pub buffer_bytes: u64,
    /// Calls per optimizer step.
    pub calls: u64,
    /// Bytes this GPU sends per step (receives the same for collectives).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub link: &'static str,
    pub seconds: f64,
    /// Seconds not hidden behind compute.
    pub exposed_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_factors() {
        assert_eq!(ring_bytes(Collective::AllReduce, 4, 1000), 1500.0);
        assert_eq!(ring_bytes(Collective::ReduceScatter, 4, 1000), 750.0);
        assert_eq!(ring_bytes(Collective::AllGather, 1, 1000), 0.0);
    }
}
