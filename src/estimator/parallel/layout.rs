//! A layout: the `parallel` and `offload` settings validated, every default resolved, over the
//! links the caller resolved.

use serde::{Serialize, Serializer};

use super::comm::{self, Topology};
use super::settings::{MixedPrecision, Offload};
use super::zero::Sharding;
use crate::estimator::config::{Precision, Setup};
use crate::estimator::error::EstimateError;
use crate::estimator::hardware::Link;

/// The data-parallel scheme of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// One replica of the model: no data parallelism.
    SingleReplica,
    /// DistributedDataParallel.
    Ddp,
    /// DeepSpeed ZeRO stage 1, 2 or 3.
    Zero(u8),
    /// FSDP `FULL_SHARD` (ZeRO-3).
    FsdpFullShard,
    /// FSDP `SHARD_GRAD_OP` (ZeRO-2).
    FsdpShardGradOp,
}

impl std::fmt::Display for Scheme {
    /// The scheme's technical name, as the JSON output carries it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scheme::SingleReplica => f.pad("single replica"),
            Scheme::Ddp => f.pad("DDP"),
            Scheme::Zero(z) => f.pad(&format!("ZeRO-{z}")),
            Scheme::FsdpFullShard => f.pad("FSDP (FULL_SHARD)"),
            Scheme::FsdpShardGradOp => f.pad("FSDP (SHARD_GRAD_OP)"),
        }
    }
}

impl Serialize for Scheme {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The links a layout runs over: between GPUs of a node, between nodes, and to host memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Links {
    pub intra: Link,
    pub inter: Link,
    pub host: Link,
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
    /// Expert-parallel degree, carved out of `dp` (1: every rank holds every expert).
    pub ep: u64,
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

pub(super) fn bad(msg: String) -> EstimateError {
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

impl Layout {
    /// The precision the units compute in: the plan's, or a mixed-precision policy's param_dtype.
    pub fn compute_precision(&self, plan: &Setup) -> Precision {
        self.mixed_precision
            .map_or(plan.dtype, |m| m.param_dtype.compute())
    }

    /// Validates the `parallel` and `offload` settings (a single GPU when absent) over `links`.
    pub fn resolve(plan: &Setup, links: Links) -> Result<Layout, EstimateError> {
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
        // DeepSpeed-MoE and Megatron-LM (`expert_model_parallel_size`) draw the expert-parallel
        // group from the data-parallel ranks: each holds E/ep experts and its own batch.
        let ep = degree("parallel.ep", p.ep)?;
        if !dp.is_multiple_of(ep) {
            return Err(bad(format!(
                "expert parallelism splits the experts over ep of the dp data-parallel ranks: ep = {ep} must divide dp = {dp}"
            )));
        }
        match p.capacity_factor {
            Some(f) if !(f.is_finite() && f > 0.0 && f <= 1e6) => {
                return Err(bad(format!(
                    "capacity_factor must be a positive number (1.0: each expert takes its balanced share), got {f}"
                )))
            }
            Some(_) if ep < 2 => {
                return Err(bad("capacity_factor caps what the all-to-all dispatch of expert parallelism sends each expert; transformers' experts are dropless: set ep > 1 or leave it out".into()))
            }
            None if p.pad_to_capacity => {
                return Err(bad(
                    "pad_to_capacity pads each expert's input to its capacity: set capacity_factor"
                        .into(),
                ))
            }
            _ => {}
        }
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
        if micro_batches as u64 > crate::estimator::estimate::MAX_ACCUMULATION as u64 {
            return Err(EstimateError::TooBig {
                field: "parallel.micro_batches",
                max: crate::estimator::estimate::MAX_ACCUMULATION as u64,
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
        let nics_per_node = degree("parallel.nics_per_node", p.nics_per_node.unwrap_or(gpn))?;
        let offload = plan.offload.clone().unwrap_or_default();
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
            if plan.quantization != crate::estimator::config::Quantization::None
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
            ep,
            zero,
            fsdp: p.fsdp,
            micro_batches,
            sequence_parallel: p.sequence_parallel,
            interleave,
            gradient_as_bucket_view: p.gradient_as_bucket_view,
            nics_per_node,
            mfu,
            intra_link: links.intra,
            inter_link: links.inter,
            host_link: links.host,
            offload,
            mixed_precision: p.mixed_precision,
        })
    }

    pub(super) fn sharding(&self) -> Sharding {
        Sharding {
            dp: self.dp,
            ep: self.ep,
            zero: self.zero,
            fsdp: self.fsdp,
            bucket_view: self.gradient_as_bucket_view,
            offload_optimizer: self.offload.optimizer,
            offload_params: self.offload.params,
        }
    }

    pub(super) fn topology(&self) -> Topology {
        Topology {
            gpus_per_node: self.gpus_per_node,
            nics_per_node: self.nics_per_node,
            intra: self.intra_link,
            inter: self.inter_link,
        }
    }

    /// The data-parallel scheme.
    pub fn scheme(&self) -> Scheme {
        match (self.zero, self.fsdp) {
            (3, true) => Scheme::FsdpFullShard,
            (_, true) => Scheme::FsdpShardGradOp,
            (0, _) if self.dp > 1 => Scheme::Ddp,
            (0, _) => Scheme::SingleReplica,
            (z, _) => Scheme::Zero(z),
        }
    }
}
