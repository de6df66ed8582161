//! The `parallel` and `offload` settings as the user gives them: degrees, ZeRO stage, FSDP and
//! its mixed-precision policy, what is offloaded. Link ids are carried for the plan layer, which
//! resolves them into [`super::Links`]; the core reads only the resolved links.

use serde::{Deserialize, Serialize};

use crate::estimator::graph::Precision;

fn one() -> u64 {
    1
}

fn is_one(v: &u64) -> bool {
    *v == 1
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
    /// Expert parallelism: the routed experts of each sparse layer split over `ep` of the
    /// data-parallel ranks, tokens exchanged with all-to-alls; must divide `dp`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub ep: u64,
    /// Expert capacity of the all-to-all dispatch (Megatron-Core's
    /// `moe_expert_capacity_factor`): each rank sends an expert at most `⌈T·k/E · f⌉` tokens
    /// and drops the rest; absent: dropless. Needs `ep > 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_factor: Option<f64>,
    /// `moe_pad_expert_input_to_capacity`: every expert gets exactly its capacity, padded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pad_to_capacity: bool,
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
    /// Link between GPUs of a node, by id; the plan layer resolves it (default from the GPU)
    /// and hands the core a [`super::Links`].
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
    pub fn compute(self) -> Precision {
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
            ep: 1,
            capacity_factor: None,
            pad_to_capacity: false,
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

impl Offload {
    /// Whether anything is offloaded.
    pub fn any(&self) -> bool {
        self.optimizer || self.params || self.activations
    }
}
