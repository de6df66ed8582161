//! Scale-out: per-GPU memory, communication and step time of a training step spread over many
//! GPUs — data parallelism (DDP), ZeRO stages 1–3 and FSDP, tensor parallelism (Megatron-LM),
//! pipeline parallelism (1F1B and interleaved), their combinations, and offload to host memory.
//!
//! Everything is derived from the simulated single-GPU step, so activations stay op-accurate:
//! the model is built once with the tensor-parallel degree (builders shard through the hook in
//! [`tp`]); pipeline stages are slices of that tape ([`pipeline`]), each replayed by the
//! simulator; each event of a stage's timeline is then rewritten for the data-parallel sharding
//! ([`zero`]) and the micro-batches a stage holds in flight. Communication is counted from the same
//! tape and sizes ([`comm`]); offload moves bytes to the host ([`offload`]); [`search`] finds the
//! cheapest layouts that fit.
//!
//! Step time: each rank's compute is its FLOPs at the GPU's peak times an assumed MFU
//! ([`comm::DEFAULT_MFU`]); a pipeline adds its bubble, `(p − 1)/v` micro-batch times (Narayanan
//! et al. 2021, §2.2). Overlap: DDP's buckets are all-reduced as they fill during the last
//! backward; FSDP/ZeRO-3 gathers and reduce-scatters overlap forward and backward except the first
//! gather and the last reduce-scatter; tensor-parallel collectives, pipeline sends, parameter
//! broadcasts after the step and `save_on_cpu` copies are on the critical path. Ranks wait for the
//! slowest every step. Not modelled: NCCL's own buffers (outside PyTorch's allocator), the CPU
//! optimizer's compute time under offload, and compute slowed by concurrent NCCL kernels.

pub mod comm;
pub mod megatron;
pub mod offload;
pub mod pipeline;
pub mod search;
pub mod tp;
pub mod zero;

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::config::{Plan, Precision};
use super::error::EstimateError;
use super::graph::{Graph, StorageKind, TensorId};
use super::simulate::{simulate, StepOptions, StepResult};
use super::timeline::{Category, Phase};
use super::units::ALLOCATOR_BLOCK as BLOCK;
use crate::presets::gpus::{self, Gpu};
use crate::presets::links::{self, Link};
use crate::presets::models::{self, Family};
use comm::{Collective, CommItem, Topology};
use zero::{RankLive, Sharded, Sharding};

fn one() -> u64 {
    1
}

/// The `parallel` key of a plan. Degrees left out are derived: `dp` from the GPUs the cluster
/// has, the cluster from the degrees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parallel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp: Option<u64>,
    #[serde(default = "one")]
    pub tp: u64,
    #[serde(default = "one")]
    pub pp: u64,
    /// ZeRO stage 0–3 (0: DDP). With `fsdp` it defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero: Option<u8>,
    /// Shard with PyTorch FSDP (`fully_shard` per layer): zero 3 = FULL_SHARD, 2 = SHARD_GRAD_OP.
    #[serde(default)]
    pub fsdp: bool,
    /// Micro-batches of `batch` samples per optimizer step (pipeline micro-batches, otherwise
    /// gradient accumulation); defaults to the plan's `accumulation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batches: Option<u32>,
    #[serde(default)]
    pub sequence_parallel: bool,
    /// Model chunks per pipeline rank (Megatron's virtual pipeline stages); 1 = plain 1F1B.
    #[serde(default = "one")]
    pub interleave: u64,
    /// DDP `gradient_as_bucket_view=True`: gradients live in the all-reduce buckets.
    #[serde(default)]
    pub gradient_as_bucket_view: bool,
    /// Link between GPUs of a node (`presets::links` id); default from the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_link: Option<String>,
    /// Network port between nodes; default from the GPU generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_link: Option<String>,
    /// Network ports per node; default one per GPU (rail-optimised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics_per_node: Option<u64>,
    /// Model FLOPs utilisation for the compute time; default [`comm::DEFAULT_MFU`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// FSDP's `MixedPrecisionPolicy` over fp32 weights; see [`MixedPrecision`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_precision: Option<MixedPrecision>,
}

/// FSDP2's `MixedPrecisionPolicy(param_dtype, reduce_dtype)` (`torch/distributed/fsdp/
/// _fully_shard/_fsdp_api.py`): the sharded parameters, their gradients and the optimizer state
/// stay in the model's fp32; each unit is all-gathered and computed in `param_dtype`, so
/// activations and the unsharded gradients are in that dtype; gradients are reduce-scattered
/// in `reduce_dtype` (`foreach_reduce` copies them into a flat buffer of that dtype). The usual
/// set-up for large models: bf16 compute, fp32 master weights and Adam states, fp32 reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixedPrecision {
    pub param_dtype: MpDtype,
    #[serde(default = "fp32")]
    pub reduce_dtype: MpDtype,
}

/// A floating-point dtype of [`MixedPrecision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MpDtype {
    Fp32,
    Bf16,
    Fp16,
}

impl MpDtype {
    pub fn bits(self) -> u64 {
        match self {
            MpDtype::Fp32 => 32,
            MpDtype::Bf16 | MpDtype::Fp16 => 16,
        }
    }
    /// The precision the graph is built in when parameters are gathered in this dtype.
    fn compute(self) -> Precision {
        match self {
            MpDtype::Fp32 => Precision::Fp32,
            MpDtype::Bf16 => Precision::Bf16,
            MpDtype::Fp16 => Precision::Fp16,
        }
    }
}

fn fp32() -> MpDtype {
    MpDtype::Fp32
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel {
            gpus_per_node: None,
            nodes: None,
            dp: None,
            tp: 1,
            pp: 1,
            zero: None,
            fsdp: false,
            micro_batches: None,
            sequence_parallel: false,
            interleave: 1,
            gradient_as_bucket_view: false,
            intra_link: None,
            inter_link: None,
            nics_per_node: None,
            mfu: None,
            mixed_precision: None,
        }
    }
}

/// The `offload` key of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    #[serde(default)]
    pub optimizer: bool,
    #[serde(default)]
    pub params: bool,
    #[serde(default)]
    pub activations: bool,
    /// Host link (`pcie4`, `pcie5`, `nvlink-c2c`, `unified`, …); default from the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// A validated layout with every default resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Layout {
    pub gpus_per_node: u64,
    pub nodes: u64,
    pub world: u64,
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    pub zero: u8,
    pub fsdp: bool,
    pub micro_batches: u32,
    pub sequence_parallel: bool,
    pub interleave: u64,
    pub gradient_as_bucket_view: bool,
    pub nics_per_node: u64,
    pub mfu: f64,
    pub intra_link: Link,
    pub inter_link: Link,
    pub host_link: Link,
    pub offload: Offload,
    pub mixed_precision: Option<MixedPrecision>,
}

const MAX_DEGREE: u64 = 1 << 20;

fn bad(msg: String) -> EstimateError {
    EstimateError::BadLayout(msg)
}

fn degree(field: &'static str, v: u64) -> Result<u64, EstimateError> {
    if v < 1 {
        return Err(EstimateError::TooSmall {
            field,
            min: 1,
            got: v,
        });
    }
    if v > MAX_DEGREE {
        return Err(EstimateError::TooBig {
            field,
            max: MAX_DEGREE,
            got: v,
        });
    }
    Ok(v)
}

fn find_link(id: &str, kind: &str) -> Result<Link, EstimateError> {
    links::find(id).ok_or_else(|| {
        bad(format!(
            "unknown {kind} link '{id}': use one of {}",
            links::LINKS
                .iter()
                .map(|l| l.id)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

impl Layout {
    /// The precision the units compute in: the plan's, or a mixed-precision policy's param_dtype.
    pub fn compute_precision(&self, plan: &Plan) -> Precision {
        self.mixed_precision
            .map_or(plan.dtype, |m| m.param_dtype.compute())
    }

    /// Resolves and validates the plan's `parallel` and `offload` keys (a single GPU when absent).
    pub fn resolve(plan: &Plan, gpu: Option<&Gpu>) -> Result<Layout, EstimateError> {
        let p = plan.parallel.clone().unwrap_or_default();
        let tp = degree("parallel.tp", p.tp)?;
        let pp = degree("parallel.pp", p.pp)?;
        let interleave = degree("parallel.interleave", p.interleave)?;
        let nodes = degree("parallel.nodes", p.nodes.unwrap_or(1))?;
        let model_par = tp.saturating_mul(pp);
        let (gpn, dp) = match (p.gpus_per_node, p.dp) {
            (Some(gpn), Some(dp)) => {
                let gpn = degree("parallel.gpus_per_node", gpn)?;
                let dp = degree("parallel.dp", dp)?;
                let world = gpn.saturating_mul(nodes);
                let used = dp.saturating_mul(model_par);
                if used > world {
                    return Err(bad(format!("the layout needs more GPUs (dp·tp·pp = {dp}·{tp}·{pp} = {used}) than the cluster has (gpus_per_node·nodes = {gpn}·{nodes} = {world})")));
                }
                if used < world {
                    return Err(bad(format!(
                        "the cluster has more GPUs (gpus_per_node·nodes = {gpn}·{nodes} = {world}) than the layout uses (dp·tp·pp = {dp}·{tp}·{pp} = {used}): {}",
                        if world % model_par == 0 { format!("set dp = {}", world / model_par) } else { "make dp·tp·pp equal the GPU count".into() }
                    )));
                }
                (gpn, dp)
            }
            (Some(gpn), None) => {
                let gpn = degree("parallel.gpus_per_node", gpn)?;
                let world = gpn.saturating_mul(nodes);
                if world % model_par != 0 {
                    return Err(bad(format!("gpus_per_node·nodes = {world} is not a multiple of tp·pp = {model_par}: no data-parallel degree fills the cluster")));
                }
                (gpn, world / model_par)
            }
            (None, Some(dp)) => {
                let dp = degree("parallel.dp", dp)?;
                let used = dp.saturating_mul(model_par);
                if used % nodes != 0 {
                    return Err(bad(format!("dp·tp·pp = {used} GPUs do not split evenly over {nodes} nodes: set gpus_per_node")));
                }
                (used / nodes, dp)
            }
            (None, None) => {
                if model_par % nodes != 0 {
                    return Err(bad(format!("tp·pp = {model_par} GPUs do not split evenly over {nodes} nodes: set gpus_per_node")));
                }
                (model_par / nodes, 1)
            }
        };
        let world = gpn.saturating_mul(nodes);
        degree("GPUs in the cluster", world)?;
        let zero = match (p.zero, p.fsdp) {
            (Some(z), _) if z > 3 => return Err(bad(format!("zero must be 0, 1, 2 or 3, got {z}"))),
            (Some(z), true) if z < 2 => {
                return Err(bad(format!("FSDP always shards gradients and optimizer state: use zero 2 (SHARD_GRAD_OP) or 3 (FULL_SHARD), not {z}")))
            }
            (Some(z), _) => z,
            (None, true) => 3,
            (None, false) => 0,
        };
        if p.sequence_parallel && tp < 2 {
            return Err(bad("sequence_parallel splits the sequence over the tensor-parallel group: it needs tp > 1".into()));
        }
        if interleave > 1 && pp < 2 {
            return Err(bad(format!(
                "interleave = {interleave} needs pipeline parallelism (pp > 1)"
            )));
        }
        let micro_batches = match (p.micro_batches, plan.accumulation) {
            (Some(m), a) if a > 1 && a != m => {
                return Err(bad(format!("micro_batches = {m} and accumulation = {a} disagree: they are the same thing, set one")));
            }
            (Some(m), _) => m,
            (None, a) => a,
        };
        degree("parallel.micro_batches", micro_batches as u64)?;
        if micro_batches as u64 > super::MAX_ACCUMULATION as u64 {
            return Err(EstimateError::TooBig {
                field: "parallel.micro_batches",
                max: super::MAX_ACCUMULATION as u64,
                got: micro_batches as u64,
            });
        }
        if interleave > 1 && !(micro_batches as u64).is_multiple_of(pp) {
            return Err(bad(format!(
                "the interleaved schedule needs micro_batches to be a multiple of pp (Megatron-LM): {micro_batches} is not a multiple of {pp}"
            )));
        }
        let mfu = p.mfu.unwrap_or(comm::DEFAULT_MFU);
        if !(mfu > 0.0 && mfu <= 1.0) {
            return Err(bad(format!("mfu must be in (0, 1], got {mfu}")));
        }
        let intra_link = match &p.intra_link {
            Some(id) => find_link(id, "intra-node")?,
            None => links::default_intra(gpu),
        };
        let inter_link = match &p.inter_link {
            Some(id) => find_link(id, "inter-node")?,
            None => links::default_inter(gpu),
        };
        let nics_per_node = degree("parallel.nics_per_node", p.nics_per_node.unwrap_or(gpn))?;
        let offload = plan.offload.clone().unwrap_or_default();
        let host_link = match &offload.link {
            Some(id) => links::find_host(id, gpu).ok_or_else(|| {
                bad(format!(
                    "unknown host link '{id}': use pcie4, pcie5, nvlink-c2c or unified"
                ))
            })?,
            None => links::default_host(gpu),
        };
        if p.mixed_precision.is_some() {
            if !p.fsdp {
                return Err(bad(
                    "mixed_precision is FSDP's MixedPrecisionPolicy: it needs \"fsdp\": true"
                        .into(),
                ));
            }
            if plan.dtype != Precision::Fp32 {
                return Err(bad(format!("mixed_precision keeps the sharded weights in fp32 and computes in its param_dtype: use \"dtype\": \"fp32\", not {}", plan.dtype.name())));
            }
            if plan.quantization != super::config::Quantization::None
                || offload.optimizer
                || offload.params
            {
                return Err(bad(
                    "mixed_precision with quantized weights or offload is not modelled".into(),
                ));
            }
        }
        if offload.params && zero < 3 {
            return Err(bad("parameter offload (ZeRO-Infinity) fetches each layer's parameters when it runs: it needs zero 3 (or fsdp)".into()));
        }
        Ok(Layout {
            gpus_per_node: gpn,
            nodes,
            world,
            dp,
            tp,
            pp,
            zero,
            fsdp: p.fsdp,
            micro_batches,
            sequence_parallel: p.sequence_parallel,
            interleave,
            gradient_as_bucket_view: p.gradient_as_bucket_view,
            nics_per_node,
            mfu,
            intra_link,
            inter_link,
            host_link,
            offload,
            mixed_precision: p.mixed_precision,
        })
    }

    fn sharding(&self) -> Sharding {
        Sharding {
            dp: self.dp,
            zero: self.zero,
            fsdp: self.fsdp,
            bucket_view: self.gradient_as_bucket_view,
            offload_optimizer: self.offload.optimizer,
            offload_params: self.offload.params,
        }
    }

    fn topology(&self) -> Topology {
        Topology {
            gpus_per_node: self.gpus_per_node,
            nics_per_node: self.nics_per_node,
            intra: self.intra_link,
            inter: self.inter_link,
        }
    }

    /// The name of the data-parallel scheme.
    pub fn scheme(&self) -> String {
        match (self.zero, self.fsdp) {
            (_, true) if self.zero == 3 => "FSDP (FULL_SHARD)".into(),
            (_, true) => "FSDP (SHARD_GRAD_OP)".into(),
            (0, _) => {
                if self.dp > 1 {
                    "DDP".into()
                } else {
                    "single replica".into()
                }
            }
            (z, _) => format!("ZeRO-{z}"),
        }
    }
}

/// One simulated piece of the model (the whole model, or one pipeline chunk).
pub struct Piece {
    pub g: Graph,
    pub r: StepResult,
    /// Parameters each op reads (through autocast's casts).
    pub op_params: Vec<Vec<TensorId>>,
    /// The FSDP unit (numbered block) of each op; `None`: the root.
    pub unit_of_op: Vec<Option<usize>>,
    pub units: Vec<Range<usize>>,
    pub accumulation: u32,
    /// Bytes one micro-batch leaves on the GPU after its forward (saved activations, the inputs it
    /// received, the output it sends): what each further micro-batch in flight adds.
    pub in_flight: u64,
    /// Saved-activation bytes packed to the host per micro-batch (activation offload).
    pub offloaded: u64,
    /// Bytes sent to the next chunk per micro-batch, and gradient bytes sent back to the previous.
    pub send_next: u64,
    pub send_prev: u64,
}

fn rounded(b: u64) -> u64 {
    b.div_ceil(BLOCK) * BLOCK
}

impl Piece {
    fn new(mut g: Graph, opts: &StepOptions, offload_acts: bool, last: bool) -> Piece {
        let offloaded = if offload_acts {
            offload::offload_activations(&mut g)
        } else {
            0
        };
        let r = simulate(&g, opts);
        let op_params = pipeline::op_params(&g);
        let bl = pipeline::blocks(&g);
        let mut unit_of_op = vec![None; g.ops.len()];
        let mut units = Vec::new();
        for b in bl.iter().filter(|b| b.numbered) {
            for u in unit_of_op[b.ops.clone()].iter_mut() {
                *u = Some(units.len());
            }
            units.push(b.ops.clone());
        }
        let mut saved_in_op = vec![false; g.storages.len()];
        for op in &g.ops {
            for &t in &op.saved {
                saved_in_op[g.tensors[t].storage] = true;
            }
        }
        let mut in_flight: u64 = r.saved_after_forward.iter().sum();
        let mut send_prev = 0;
        for (s, st) in g.storages.iter().enumerate() {
            if st.kind == StorageKind::Input {
                in_flight += rounded(st.bytes.0);
                let _ = s;
            }
        }
        for t in g
            .tensors
            .iter()
            .filter(|t| g.storages[t.storage].kind == StorageKind::Input && t.requires_grad)
        {
            send_prev += g.storages[t.storage].bytes.0;
        }
        let mut seen = Vec::new();
        let mut send_next = 0;
        for &t in &g.kept {
            let s = g.tensors[t].storage;
            if !saved_in_op[s] && !seen.contains(&s) {
                seen.push(s);
                in_flight += rounded(g.storages[s].bytes.0);
            }
            if !last {
                send_next += g.storages[s].bytes.0;
            }
        }
        Piece {
            g,
            r,
            op_params,
            unit_of_op,
            units,
            accumulation: opts.accumulation,
            in_flight,
            offloaded,
            send_next,
            send_prev,
        }
    }

    fn forward_flops(&self) -> f64 {
        self.r.forward_flops
    }
    fn step_flops(&self) -> f64 {
        3.0 * self.r.forward_flops + self.r.recompute_flops
    }
}

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
    fn of(l: &RankLive, overhead: u64, workspaces: u64, context: u64) -> PerGpu {
        let c = |k: Category| l.cats[k.index()];
        let peak = l.total();
        let reserved = peak + overhead + workspaces;
        PerGpu {
            params_bytes: c(Category::Params),
            grads_bytes: c(Category::Gradients),
            optimizer_state_bytes: c(Category::OptimizerState),
            activations_bytes: c(Category::Activations)
                + c(Category::BackwardTemps)
                + c(Category::Inputs),
            other_bytes: c(Category::Buffers) + c(Category::OptimizerTemps) + l.comm_buffers,
            comm_buffer_bytes: l.comm_buffers,
            peak_allocated_bytes: peak,
            reserved_bytes: reserved,
            device_total_bytes: reserved + context,
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
    pub verdict: String,
}

/// The answer for a multi-GPU plan.
#[derive(Clone, Debug, Serialize)]
pub struct ParallelEstimate {
    pub layout: Layout,
    pub scheme: String,
    pub ranks: Vec<RankReport>,
    /// Index in `ranks` of the pipeline rank whose device total is the largest.
    pub peak_rank: usize,
    pub per_gpu: PerGpu,
    pub host_bytes: u64,
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

fn tp_check(plan: &Plan, g: &Graph, tp: u64) -> Result<(), EstimateError> {
    if tp <= 1 {
        return Ok(());
    }
    if g.tp.size == tp && g.tp.heads.is_some() {
        return Ok(());
    }
    let family = models::find(&plan.model).map(|m| m.family);
    match family {
        Some(Family::Cnn) | Some(Family::Rnn) => Err(bad(format!(
            "{} has no attention heads to split: tensor parallelism (tp = {tp}) applies to transformer models; use dp, zero or pp",
            plan.model
        ))),
        _ => Err(bad(format!(
            "the builder of {} does not shard its layers yet (it must call the tensor-parallel hook, `estimator::parallel::tp`): tp = {tp} cannot be estimated",
            plan.model
        ))),
    }
}

/// Everything that depends only on the model and the model-parallel degrees (tp, pp, chunks),
/// shared by layouts that differ in dp, ZeRO stage or links.
pub struct Prepared {
    pub pieces: Vec<Piece>,
    pub chunks: u64,
    pub forward_flops_full: f64,
    /// Reserved minus allocated of the simulated step (allocator fragmentation), carried to ranks.
    pub overhead: u64,
}

/// Builds the graph for `layout`'s tensor-parallel degree, cuts it into `pp·interleave` chunks
/// and simulates each.
pub fn prepare(plan: &Plan, layout: &Layout) -> Result<Prepared, EstimateError> {
    let mut bp = plan.clone();
    let mut par = bp.parallel.clone().unwrap_or_default();
    par.tp = layout.tp;
    par.sequence_parallel = layout.sequence_parallel;
    bp.parallel = Some(par);
    bp.accumulation = 1;
    // Under a mixed-precision policy the step runs as a model in its param_dtype would; the
    // fp32 shards are accounted by the sharding.
    bp.dtype = layout.compute_precision(plan);
    let g = super::build_graph(&bp)?;
    tp_check(plan, &g, layout.tp)?;
    prepare_graph(plan, layout, g)
}

/// [`prepare`] for a graph already built with `layout.tp` (a model outside the presets).
pub fn prepare_graph(plan: &Plan, layout: &Layout, g: Graph) -> Result<Prepared, EstimateError> {
    if layout.tp > 1 && (g.tp.size != layout.tp || g.tp.heads.is_none()) {
        return Err(bad(format!(
            "the graph was not built with tensor parallelism tp = {}",
            layout.tp
        )));
    }
    let opts = StepOptions {
        optimizer: plan.opt,
        optimizer_impl: plan.optimizer_impl(),
        accumulation: layout.micro_batches,
        device: plan.device,
    };
    let chunks = layout.pp * layout.interleave;
    let bl = pipeline::blocks(&g);
    if chunks as usize > bl.len() {
        let layers = bl.iter().filter(|b| b.numbered).count();
        return Err(bad(format!(
            "the pipeline (pp = {}{}) is deeper than the layers of {}: it splits into {} blocks ({layers} numbered layers plus the rest); use at most pp·interleave = {}",
            layout.pp,
            if layout.interleave > 1 { format!(" × interleave {}", layout.interleave) } else { String::new() },
            plan.model,
            bl.len(),
            bl.len()
        )));
    }
    let forward_flops_full: f64 = g.ops.iter().map(|o| o.flops).sum();
    let whole = simulate(&g, &opts);
    let overhead = whole
        .timeline
        .reserved()
        .0
        .saturating_sub(whole.timeline.peak().map(|e| e.live.total().0).unwrap_or(0));
    let pieces = if chunks == 1 {
        vec![Piece::new(g, &opts, layout.offload.activations, true)]
    } else {
        let ranges = pipeline::stage_ranges(&g, &bl, chunks as usize);
        let n = ranges.len();
        ranges
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                Piece::new(
                    pipeline::slice(&g, r),
                    &opts,
                    layout.offload.activations,
                    i + 1 == n,
                )
            })
            .collect()
    };
    Ok(Prepared {
        pieces,
        chunks,
        forward_flops_full,
        overhead,
    })
}

fn cat_name(i: usize) -> &'static str {
    Category::ALL[i].key()
}

/// Estimates `plan` on its multi-GPU layout.
pub fn estimate_parallel(plan: &Plan) -> Result<ParallelEstimate, EstimateError> {
    estimate_parallel_with(plan, |layout| prepare(plan, layout))
}

/// [`estimate_parallel`] over pieces made by `prep` (e.g. [`prepare_graph`] on a custom graph).
pub fn estimate_parallel_with(
    plan: &Plan,
    prep: impl Fn(&Layout) -> Result<Prepared, EstimateError>,
) -> Result<ParallelEstimate, EstimateError> {
    let gpu = match &plan.gpu {
        Some(id) => Some(
            gpus::find(id)
                .ok_or_else(|| EstimateError::Unsupported(format!("unknown GPU '{id}'")))?,
        ),
        None => None,
    };
    let layout = Layout::resolve(plan, gpu.as_ref())?;
    let prepare = &prep;
    let prep = prepare(&layout)?;
    let mut est = evaluate(plan, &layout, &prep, gpu.as_ref());
    if let Some(off) = est.offload.as_mut() {
        let mut base = layout.clone();
        base.offload = Offload::default();
        let base_prep = if layout.offload.activations {
            prepare(&base)?
        } else {
            prep
        };
        let without = evaluate(plan, &base, &base_prep, gpu.as_ref());
        off.gpu_bytes_saved = without
            .per_gpu
            .peak_allocated_bytes
            .saturating_sub(est.per_gpu.peak_allocated_bytes);
    }
    Ok(est)
}

/// Per-rank memory, communication and time of `layout` over prepared pieces.
pub fn evaluate(
    plan: &Plan,
    layout: &Layout,
    prep: &Prepared,
    gpu: Option<&Gpu>,
) -> ParallelEstimate {
    let sh = layout.sharding();
    let states = plan.opt.states_per_param();
    let sharded: Vec<Sharded> = prep
        .pieces
        .iter()
        .map(|p| Sharded::new(p, sh, states, layout.mixed_precision))
        .collect();
    let topo = layout.topology();
    let sm = gpu.map(|g| g.sm).unwrap_or(90);
    let workspaces = if sm == 0 {
        0
    } else {
        super::device::cublas_workspaces(sm).0
    };
    let context = gpu
        .map(|g| g.context.0)
        .unwrap_or(super::device::DEFAULT_CONTEXT.0);
    let peak_flops = gpu.map(|g| comm::peak_flops(g, layout.compute_precision(plan)) * layout.mfu);
    let m = layout.micro_batches as u64;
    let (pp, v) = (layout.pp, layout.interleave);

    let mut ranks = Vec::new();
    for i in 0..pp {
        let chunks: Vec<usize> = (0..v)
            .map(|j| (i + j * pp) as usize)
            .filter(|&c| c < prep.pieces.len())
            .collect();
        let n_in_flight = pipeline::in_flight(i, pp, m, v);
        let mean_in_flight = chunks
            .iter()
            .map(|&c| prep.pieces[c].in_flight)
            .sum::<u64>()
            / chunks.len().max(1) as u64;
        let extra = n_in_flight.saturating_sub(1) * mean_in_flight;
        // What each chunk holds while another runs: its state at the start of the step, without
        // the micro-batch's inputs (counted in flight).
        let statics: Vec<RankLive> = chunks
            .iter()
            .map(|&c| {
                let ev = &prep.pieces[c].r.timeline.events[0];
                let mut l = sharded[c].at(ev);
                l.cats[Category::Inputs.index()] = 0;
                l
            })
            .collect();
        let mut best: Option<(RankLive, Phase, Option<String>)> = None;
        let mut consider = |l: RankLive, ph: Phase, op: Option<String>| {
            if best.as_ref().is_none_or(|b| l.total() > b.0.total()) {
                best = Some((l, ph, op));
            }
        };
        let mut opt_sum = RankLive::default();
        for (k, &c) in chunks.iter().enumerate() {
            let piece = &prep.pieces[c];
            let mut others = RankLive::default();
            for (k2, s) in statics.iter().enumerate() {
                if k2 != k {
                    others.add(s);
                }
            }
            for ev in &piece.r.timeline.events {
                let mut l = sharded[c].at(ev);
                if ev.phase == Phase::Optimizer {
                    opt_sum.add(&l);
                    continue;
                }
                if matches!(ev.phase, Phase::Forward | Phase::Backward) {
                    l.cats[Category::Activations.index()] += extra;
                }
                l.add(&others);
                let name = ev.op.map(|o| {
                    let op = &piece.g.ops[o];
                    if op.name.is_empty() {
                        op.kind.to_string()
                    } else {
                        format!("{} ({})", op.name, op.kind)
                    }
                });
                consider(l, ev.phase, name);
            }
        }
        consider(opt_sum, Phase::Optimizer, None);
        let (live, peak_phase, peak_op) =
            best.unwrap_or((RankLive::default(), Phase::Forward, None));
        let memory = PerGpu::of(&live, prep.overhead, workspaces, context);
        let mut breakdown: Vec<(String, u64)> = (0..Category::COUNT)
            .map(|k| (cat_name(k).to_string(), live.cats[k]))
            .collect();
        breakdown.push(("comm_buffers".into(), live.comm_buffers));

        // Host memory of this rank.
        let mut host = 0u64;
        for &c in &chunks {
            let s = &sharded[c];
            if layout.offload.optimizer {
                // The state, and the gradients and parameters of the share this rank steps on,
                // pinned (with parameter offload that copy is the parameter shard itself).
                host += s.optimizer_state()
                    + s.optimizer_share(s.grads_full())
                    + s.optimizer_share(s.params_full());
            } else if layout.offload.params {
                host += s.params_at_rest();
            }
            host += prep.pieces[c].offloaded * n_in_flight.max(1).min(m.max(1) * v);
        }
        ranks.push((
            i,
            chunks,
            n_in_flight,
            peak_phase,
            peak_op,
            memory,
            breakdown,
            host,
        ));
    }

    // Communication and time per rank.
    let mut reports = Vec::new();
    let mut all_items: Vec<Vec<CommItem>> = Vec::new();
    let mut compute_per_mb = Vec::new();
    let mut fwd_per_mb = Vec::new();
    for (i, chunks, _, _, _, _, _, _) in &ranks {
        let f: f64 = chunks.iter().map(|&c| prep.pieces[c].forward_flops()).sum();
        let st: f64 = chunks.iter().map(|&c| prep.pieces[c].step_flops()).sum();
        let (cf, cs) = match peak_flops {
            Some(pf) => (f / pf, st / pf),
            None => (0.0, 0.0),
        };
        fwd_per_mb.push(cf);
        compute_per_mb.push(cs);
        let items = comm_items(layout, &topo, prep, &sharded, chunks, *i, cf, cs - cf);
        all_items.push(items);
    }
    let c_max = compute_per_mb.iter().cloned().fold(0.0, f64::max);
    let compute = if pp > 1 {
        c_max * (m as f64 + (pp - 1) as f64 / v as f64)
    } else {
        c_max * m as f64
    };
    // Ranks wait for each other every step: the slowest sets the pace.
    let exposed_max = all_items
        .iter()
        .map(|it| it.iter().map(|x| x.exposed_seconds).sum::<f64>())
        .fold(0.0, f64::max);
    let step = compute + exposed_max;
    for (k, r) in ranks.into_iter().enumerate() {
        let (i, chunks, n_in_flight, peak_phase, peak_op, memory, breakdown, host) = r;
        let items = &all_items[k];
        reports.push(RankReport {
            stage: i,
            chunks: chunks.iter().map(|&c| c as u64).collect(),
            micro_batches_in_flight: n_in_flight,
            peak_phase,
            peak_op,
            memory,
            breakdown,
            host_bytes: host,
            compute_seconds: compute_per_mb[k] * m as f64,
            comm_bytes_sent: items
                .iter()
                .filter(|x| x.scheme != "offload")
                .map(|x| x.bytes_sent)
                .sum(),
            comm_seconds: items
                .iter()
                .filter(|x| x.scheme != "offload")
                .map(|x| x.seconds)
                .sum(),
            exposed_comm_seconds: items
                .iter()
                .filter(|x| x.scheme != "offload")
                .map(|x| x.exposed_seconds)
                .sum(),
        });
    }
    let peak_rank = (0..reports.len())
        .max_by_key(|&k| (reports[k].memory.device_total_bytes, std::cmp::Reverse(k)))
        .unwrap_or(0);
    let busiest = (0..reports.len())
        .max_by(|&a, &b| reports[a].comm_bytes_sent.cmp(&reports[b].comm_bytes_sent))
        .unwrap_or(0);
    let per_gpu = reports[peak_rank].memory.clone();
    let host_bytes = reports.iter().map(|r| r.host_bytes).max().unwrap_or(0);
    let useful = compute_per_mb.iter().sum::<f64>() / compute_per_mb.len().max(1) as f64 * m as f64;

    let offload = (layout.offload.optimizer || layout.offload.params || layout.offload.activations).then(|| {
        let items: Vec<&CommItem> = all_items[peak_rank].iter().filter(|x| x.scheme == "offload").collect();
        let transfer: u64 = items.iter().map(|x| x.bytes_sent + x.bytes_received).sum();
        let secs: f64 = items.iter().map(|x| x.seconds).sum();
        let exposed: f64 = items.iter().map(|x| x.exposed_seconds).sum();
        // Filled in by `estimate_parallel`, which runs the same layout without offload.
        let saved = 0u64;
        let shared = layout.host_link.shared_memory;
        let hidden = exposed <= 1e-3 * step.max(1e-9) || exposed == 0.0;
        let verdict = if peak_flops.is_none() {
            format!("{:.3} s of copies per step over {}; give a GPU to compare with compute", secs, layout.host_link.name)
        } else if hidden {
            format!("copies ({:.3} s per step over {}) hide behind compute", secs, layout.host_link.name)
        } else {
            format!(
                "copies take {:.3} s per step over {}, {:.3} s of it not hidden behind compute{}",
                secs,
                layout.host_link.name,
                exposed,
                if layout.offload.activations { " (save_on_cpu copies run on the compute stream)" } else { "" }
            )
        };
        OffloadReport {
            link: layout.host_link.id,
            link_gbs_per_direction: layout.host_link.gbs_per_direction,
            shared_memory: shared,
            host_bytes,
            host_bytes_per_node: host_bytes.saturating_mul(layout.gpus_per_node),
            gpu_bytes_saved: saved,
            transfer_bytes_per_step: transfer,
            transfer_seconds_per_step: secs,
            exposed_seconds_per_step: exposed,
            hidden,
            verdict: if shared { format!("{verdict}; host and GPU share one memory pool, so the machine's total does not shrink") } else { verdict },
        }
    });
    let communication = all_items[busiest].clone();
    let fits = gpu.map(|g| per_gpu.device_total_bytes <= g.memory.0);
    ParallelEstimate {
        scheme: layout.scheme(),
        layout: layout.clone(),
        peak_rank,
        per_gpu,
        host_bytes,
        comm_bytes_per_step: reports[busiest].comm_bytes_sent,
        comm_seconds_per_step: reports[busiest].comm_seconds,
        comm_exposed_seconds_per_step: reports[busiest].exposed_comm_seconds,
        communication,
        compute_seconds: peak_flops.map(|_| compute),
        step_seconds: peak_flops.map(|_| step),
        scaling_efficiency: peak_flops.map(|_| if step > 0.0 { useful / step } else { 1.0 }),
        samples_per_step: plan.batch.saturating_mul(m).saturating_mul(layout.dp),
        ranks: reports,
        offload,
        fits,
    }
}

#[allow(clippy::too_many_arguments)]
fn item(
    scheme: &'static str,
    what: String,
    c: Collective,
    n: u64,
    buffer: u64,
    calls: u64,
    link: &comm::GroupLink,
    exposed: f64,
) -> CommItem {
    let per = comm::ring_bytes(c, n, buffer);
    let bytes = (per * calls as f64).round() as u64;
    let secs = comm::collective_seconds(c, n, buffer, link) * calls as f64;
    CommItem {
        scheme,
        what,
        collective: Some(c),
        group: n,
        buffer_bytes: buffer,
        calls,
        bytes_sent: bytes,
        bytes_received: bytes,
        link: link.link,
        seconds: secs,
        exposed_seconds: exposed.clamp(0.0, secs),
    }
}

/// The traffic of pipeline rank `stage` per optimizer step, with the part of each kind that
/// compute cannot hide. `fwd`/`bwd`: compute seconds of one micro-batch's forward and backward.
#[allow(clippy::too_many_arguments)]
fn comm_items(
    layout: &Layout,
    topo: &Topology,
    prep: &Prepared,
    sharded: &[Sharded],
    chunks: &[usize],
    stage: u64,
    fwd: f64,
    bwd: f64,
) -> Vec<CommItem> {
    let mut out = Vec::new();
    let m = layout.micro_batches as u64;
    let (dp, tp, pp) = (layout.dp, layout.tp, layout.pp);
    let _ = stage;
    // Data parallelism.
    if dp > 1 {
        let l = topo.group(tp, dp);
        let grads: u64 = chunks.iter().map(|&c| sharded[c].grads_reduced()).sum();
        let params: u64 = chunks.iter().map(|&c| sharded[c].params_full()).sum();
        let secs = |c: Collective, b: u64| comm::collective_seconds(c, dp, b, &l);
        match (layout.zero, layout.fsdp) {
            (0 | 1, false) => {
                // Bucketed all-reduce once per step (`no_sync` on earlier micro-batches), overlapping
                // the last backward; the last bucket (the first layers) is ready only at its end.
                let buckets: Vec<(u64, f64)> = chunks
                    .iter()
                    .flat_map(|&c| {
                        sharded[c]
                            .buckets
                            .iter()
                            .copied()
                            .zip(sharded[c].bucket_ready.iter().copied())
                    })
                    .collect();
                let total: f64 = buckets
                    .iter()
                    .map(|&(b, _)| secs(Collective::AllReduce, b))
                    .sum();
                // The comm stream takes buckets in order as they become ready during the last
                // backward (Li et al. 2020, "PyTorch Distributed", §3.2.3); what runs past the
                // backward's end is exposed.
                let mut end = 0.0f64;
                for &(b, ready) in &buckets {
                    end = end.max(ready * bwd) + secs(Collective::AllReduce, b);
                }
                let exposed = (end - bwd).max(0.0);
                let mut it = item(
                    "dp",
                    format!("DDP gradient all-reduce ({} buckets)", buckets.len()),
                    Collective::AllReduce,
                    dp,
                    grads,
                    1,
                    &l,
                    0.0,
                );
                it.seconds = total;
                it.exposed_seconds = exposed.min(total);
                out.push(it);
                if layout.zero == 1 {
                    out.push(item(
                        "zero",
                        "ZeroRedundancyOptimizer parameter broadcast after the step".into(),
                        Collective::AllGather,
                        dp,
                        params,
                        1,
                        &l,
                        f64::INFINITY,
                    ));
                }
            }
            (2, false) => {
                let t = secs(Collective::ReduceScatter, grads) * m as f64;
                let tail = secs(Collective::ReduceScatter, grads.min(zero::DDP_BUCKET_CAP));
                out.push(item(
                    "zero",
                    "gradient reduce-scatter (each micro-batch)".into(),
                    Collective::ReduceScatter,
                    dp,
                    grads,
                    m,
                    &l,
                    (t - bwd * m as f64).max(tail * m as f64),
                ));
                out.push(item(
                    "zero",
                    "parameter all-gather after the step".into(),
                    Collective::AllGather,
                    dp,
                    params,
                    1,
                    &l,
                    f64::INFINITY,
                ));
            }
            (z, _) => {
                // FSDP / ZeRO-3: gathers per unit, prefetched one ahead; the first unit's gather and
                // the last reduce-scatter cannot hide.
                let first_unit = chunks
                    .iter()
                    .filter_map(|&c| sharded[c].unit_params_full().first().copied())
                    .next()
                    .unwrap_or(0)
                    + chunks
                        .iter()
                        .map(|&c| sharded[c].root_params_full())
                        .sum::<u64>();
                let last_unit = chunks
                    .iter()
                    .filter_map(|&c| sharded[c].unit_grads_full().first().copied())
                    .next()
                    .unwrap_or(grads);
                let agf = secs(Collective::AllGather, params);
                out.push(item(
                    if layout.fsdp { "fsdp" } else { "zero" },
                    "parameter all-gather in forward (each micro-batch)".into(),
                    Collective::AllGather,
                    dp,
                    params,
                    m,
                    &l,
                    ((agf - fwd).max(secs(Collective::AllGather, first_unit))) * m as f64,
                ));
                let mut bwd_busy = 0.0;
                if z >= 3 {
                    let root: u64 = if layout.fsdp {
                        chunks.iter().map(|&c| sharded[c].root_params_full()).sum()
                    } else {
                        0
                    };
                    let b = params.saturating_sub(root);
                    let agb = secs(Collective::AllGather, b);
                    bwd_busy += agb;
                    out.push(item(
                        if layout.fsdp { "fsdp" } else { "zero" },
                        "parameter all-gather in backward (each micro-batch)".into(),
                        Collective::AllGather,
                        dp,
                        b,
                        m,
                        &l,
                        0.0,
                    ));
                }
                let rs = secs(Collective::ReduceScatter, grads);
                bwd_busy += rs;
                let exposed =
                    ((bwd_busy - bwd).max(secs(Collective::ReduceScatter, last_unit))) * m as f64;
                out.push(item(
                    if layout.fsdp { "fsdp" } else { "zero" },
                    "gradient reduce-scatter (each micro-batch)".into(),
                    Collective::ReduceScatter,
                    dp,
                    grads,
                    m,
                    &l,
                    exposed,
                ));
            }
        }
    }
    // Tensor parallelism: the collectives the builder recorded, on the critical path.
    if tp > 1 {
        let l = topo.group(1, tp);
        let mut by_kind: Vec<(Collective, bool, u64, u64)> = Vec::new();
        for &c in chunks {
            let g = &prep.pieces[c].g;
            for r in &g.tp.comm {
                let recompute = !r.backward && g.ops.get(r.op).is_some_and(|o| o.segment.is_some());
                let calls = if recompute { 2 } else { 1 };
                match by_kind
                    .iter_mut()
                    .find(|x| x.0 == r.collective && x.1 == r.backward && x.2 == r.bytes)
                {
                    Some(x) => x.3 += calls,
                    None => by_kind.push((r.collective, r.backward, r.bytes, calls)),
                }
            }
        }
        for (c, backward, bytes, calls) in by_kind {
            let what = format!(
                "Megatron {} {:?} per micro-batch",
                if backward { "backward" } else { "forward" },
                c
            )
            .to_ascii_lowercase();
            out.push(item("tp", what, c, tp, bytes, calls * m, &l, f64::INFINITY));
        }
    }
    // Pipeline parallelism: activations forward, gradients back, per micro-batch and chunk.
    if pp > 1 {
        let l = topo.pair(tp * dp, pp);
        let next: u64 = chunks.iter().map(|&c| prep.pieces[c].send_next).sum();
        let prev: u64 = chunks.iter().map(|&c| prep.pieces[c].send_prev).sum();
        let sent = (next + prev) * m;
        let secs = (comm::collective_seconds(Collective::SendRecv, 2, next, &l)
            + comm::collective_seconds(Collective::SendRecv, 2, prev, &l))
            * m as f64;
        out.push(CommItem {
            scheme: "pp",
            what: "activations to the next stage, gradients to the previous (each micro-batch)"
                .into(),
            collective: Some(Collective::SendRecv),
            group: 2,
            buffer_bytes: next.max(prev),
            calls: m * chunks.len() as u64,
            bytes_sent: sent,
            bytes_received: sent,
            link: l.link,
            seconds: secs,
            exposed_seconds: secs,
        });
    }
    // Offload copies over the host link.
    let hl = &layout.host_link;
    let host_item = |what: String, bytes: u64, calls: u64, d2h: bool, window: f64| {
        let secs = comm::copy_seconds(bytes, hl) * calls as f64;
        CommItem {
            scheme: "offload",
            what,
            collective: None,
            group: 1,
            buffer_bytes: bytes,
            calls,
            bytes_sent: if d2h { bytes * calls } else { 0 },
            bytes_received: if d2h { 0 } else { bytes * calls },
            link: hl.id,
            seconds: secs,
            exposed_seconds: (secs - window).max(0.0),
        }
    };
    if layout.offload.optimizer {
        let g: u64 = chunks
            .iter()
            .map(|&c| sharded[c].optimizer_share(sharded[c].grads_full()))
            .sum();
        let p: u64 = chunks
            .iter()
            .map(|&c| sharded[c].optimizer_share(sharded[c].params_full()))
            .sum();
        out.push(host_item(
            "gradients to the host optimizer (overlaps the last backward)".into(),
            g,
            1,
            true,
            bwd,
        ));
        out.push(host_item(
            "updated parameters back from the host".into(),
            p,
            1,
            false,
            0.0,
        ));
    }
    if layout.offload.params {
        let p: u64 = chunks.iter().map(|&c| sharded[c].params_at_rest()).sum();
        out.push(host_item(
            "parameter shards to the GPU before each gather (forward and backward)".into(),
            p,
            2 * m,
            false,
            (fwd + bwd) * m as f64,
        ));
    }
    if layout.offload.activations {
        let a: u64 = chunks.iter().map(|&c| prep.pieces[c].offloaded).sum();
        out.push(host_item(
            "saved activations to the host (save_on_cpu, compute stream)".into(),
            a,
            m,
            true,
            0.0,
        ));
        out.push(host_item(
            "saved activations back for backward".into(),
            a,
            m,
            false,
            0.0,
        ));
    }
    out
}

/// The per-GPU answer of a single-GPU estimate, in the same shape as a multi-GPU one.
pub fn single_gpu(e: &super::Estimate) -> PerGpu {
    let c = |k: Category| e.category(k).0;
    PerGpu {
        params_bytes: c(Category::Params),
        grads_bytes: c(Category::Gradients),
        optimizer_state_bytes: c(Category::OptimizerState),
        activations_bytes: c(Category::Activations)
            + c(Category::BackwardTemps)
            + c(Category::Inputs),
        other_bytes: c(Category::Buffers) + c(Category::OptimizerTemps),
        comm_buffer_bytes: 0,
        peak_allocated_bytes: e.peak_allocated.0,
        reserved_bytes: e.reserved.0,
        device_total_bytes: e.device_total.0,
    }
}

/// Compute seconds of a single-GPU step at the default MFU.
pub fn single_gpu_step_seconds(plan: &Plan, e: &super::Estimate, gpu: &Gpu) -> f64 {
    e.step_flops(plan.accumulation) / (comm::peak_flops(gpu, plan.dtype) * comm::DEFAULT_MFU)
}
