//! What a multi-GPU estimate answers: per-GPU memory, each pipeline rank, communication, offload
//! and step time, as facts and enums; the page and the CLI put them in words.

use serde::Serialize;

use super::comm::CommItem;
use super::layout::{Layout, Scheme};
use super::zero::RankLive;
use crate::estimator::estimate::Estimate;
use crate::estimator::timeline::{Category, Phase};

/// Live bytes of one rank at its peak, by what they are for.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PerGpu {
    /// Parameters (shards plus gathered units).
    pub params_bytes: u64,
    pub grads_bytes: u64,
    pub optimizer_state_bytes: u64,
    /// Activations, the micro-batches in flight, the input batch and backward temporaries.
    pub activations_bytes: u64,
    /// Buffers, optimizer temporaries and communication buffers (DDP buckets, reduce-scatter input).
    pub other_bytes: u64,
    pub comm_buffer_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub device_total_bytes: u64,
}

impl PerGpu {
    pub(super) fn of(l: &RankLive, overhead: u64, workspaces: u64, context: u64) -> PerGpu {
        let peak = l.total();
        let reserved = peak + overhead + workspaces;
        PerGpu::from_categories(
            |k| l.cats[k.index()],
            l.comm_buffers,
            peak,
            reserved,
            reserved + context,
        )
    }

    /// The rows grouped as the report shows them, from bytes by category at the peak.
    fn from_categories(
        c: impl Fn(Category) -> u64,
        comm_buffers: u64,
        peak: u64,
        reserved: u64,
        device_total: u64,
    ) -> PerGpu {
        PerGpu {
            params_bytes: c(Category::Params),
            grads_bytes: c(Category::Gradients),
            optimizer_state_bytes: c(Category::OptimizerState),
            activations_bytes: c(Category::Activations)
                + c(Category::BackwardTemps)
                + c(Category::Inputs),
            other_bytes: c(Category::Buffers) + c(Category::OptimizerTemps) + comm_buffers,
            comm_buffer_bytes: comm_buffers,
            peak_allocated_bytes: peak,
            reserved_bytes: reserved,
            device_total_bytes: device_total,
        }
    }
}

/// One pipeline rank (all its data- and tensor-parallel replicas are alike).
#[derive(Clone, Debug, Serialize)]
pub struct RankReport {
    pub stage: u64,
    /// Model chunks this rank holds (pipeline chunk indices).
    pub chunks: Vec<u64>,
    pub micro_batches_in_flight: u64,
    pub peak_phase: Phase,
    pub peak_op: Option<String>,
    pub memory: PerGpu,
    /// Bytes at the peak by simulator category, plus `comm_buffers`.
    pub breakdown: Vec<(String, u64)>,
    pub host_bytes: u64,
    pub compute_seconds: f64,
    pub comm_bytes_sent: u64,
    pub comm_seconds: f64,
    pub exposed_comm_seconds: f64,
}

/// What offload does for the peak rank.
#[derive(Clone, Debug, Serialize)]
pub struct OffloadReport {
    pub link: &'static str,
    /// The host link's name.
    #[serde(skip)]
    pub link_name: &'static str,
    pub link_gbs_per_direction: f64,
    pub shared_memory: bool,
    /// Host memory per GPU (pinned), and per node.
    pub host_bytes: u64,
    pub host_bytes_per_node: u64,
    pub gpu_bytes_saved: u64,
    pub transfer_bytes_per_step: u64,
    pub transfer_seconds_per_step: f64,
    pub exposed_seconds_per_step: f64,
    /// Whether the copies hide behind compute.
    pub hidden: bool,
    /// Whether the timing was judged against compute (a GPU was given).
    #[serde(skip)]
    pub timed: bool,
    /// Whether `save_on_cpu` copies run on the compute stream (activation offload).
    #[serde(skip)]
    pub on_compute_stream: bool,
}

/// The answer for a multi-GPU plan.
#[derive(Clone, Debug, Serialize)]
pub struct ParallelEstimate {
    pub layout: Layout,
    pub scheme: Scheme,
    pub ranks: Vec<RankReport>,
    /// Index in `ranks` of the pipeline rank whose device total is the largest.
    pub peak_rank: usize,
    pub per_gpu: PerGpu,
    pub host_bytes: u64,
    /// Bytes of routed-expert weights the peak rank holds unsharded (its `E/ep` experts of
    /// each sparse layer it runs); 0 for a model without experts.
    pub expert_params_bytes: u64,
    /// Bytes the busiest GPU sends per optimizer step over NCCL, its total communication time,
    /// and the part not hidden behind compute (host copies are in `offload`).
    pub comm_bytes_per_step: u64,
    pub comm_seconds_per_step: f64,
    pub comm_exposed_seconds_per_step: f64,
    pub communication: Vec<CommItem>,
    /// Compute of one step at the assumed MFU, pipeline bubble included; `None` without a GPU.
    pub compute_seconds: Option<f64>,
    pub step_seconds: Option<f64>,
    /// Time spent computing over step time (1 = perfect scaling).
    pub scaling_efficiency: Option<f64>,
    pub samples_per_step: u64,
    pub offload: Option<OffloadReport>,
    /// Whether the peak rank fits the GPU.
    pub fits: Option<bool>,
}

/// The per-GPU answer of a single-GPU estimate, in the same shape as a multi-GPU one.
pub fn single_gpu(e: &Estimate) -> PerGpu {
    PerGpu::from_categories(
        |k| e.category(k).0,
        0,
        e.peak_allocated.0,
        e.reserved.0,
        e.device_total.0,
    )
}
